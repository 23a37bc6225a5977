# agent-sim: concurrent coding-agent sessions. Each session grows a main context step by step,
# runs cold sub-agents that leave the main context untouched, then comes back to the main
# context. Does the main context survive the sub-agents?
workload agent_sim {
  doc "Concurrent agent sessions: does the main context survive its sub-agents?"

  params {
    sessions: int = 3 in 1..1024 doc "concurrent sessions"
    main_tokens: tokens = 150k in 1.. doc "new tokens of the main context"
    step_tokens: tokens = 5k in 1.. doc "main growth per turn"
    sub_tokens: tokens = 40k in 1.. doc "size of each sub-agent window"
    sub_windows: int = 2 in 0.. doc "sub-agents per session"
    finalize_tokens: tokens = min(max(2k, $timing_tokens), max(2k, $main_tokens / 4)) in 1.. doc "new suffix of the back-to-main turn (what prices a token here, $timing_tokens, within a quarter of the main context)"
    max_tokens: int = 64 in 1.. doc "generation per turn, replayed into the next"
    miss_threshold: ratio = 66% in 0..1 doc "least reuse of a hit (the finalize must be one)"
    ttft_ratio: float = 1.75 in 1.. doc "finalize prefill time vs its baseline (a warning)"
    max_concurrency: int = $sessions in 1.. doc "requests in flight at once"
    thinking: bool = false doc "let the model think (off sends reasoning_effort none)"
    baselines: int = 3 in 1.. doc "isolated baseline samples per session (the fastest counts)"
  }
  concurrency = $max_concurrency
  # one definition of a hit for the printed HIT/MISS, the `survival` gate and the report
  hit_ratio = $miss_threshold
  options { reasoning_effort = if($thinking, null, "none") }
  # what a cold prefill costs here, measured alone before the sessions start: the reference of
  # `ttft_disagrees` (an engine that recomputes what it reports cached)
  calibrate ttft_threshold tokens $finalize_tokens repeat 2

  session main repeat $sessions {
    system "You are a helpful assistant."
    grow until $main_tokens by $step_tokens label main {
      user filler $step_tokens
      reply $max_tokens replay
    }
    spawn $sub_windows cold label sub {
      system "You are a helpful assistant."
      user filler $sub_tokens
      reply $max_tokens
    }
    # Back to the main context after the sub-agents, and at once, in the same stretch timed
    # alone (`isolated`: nothing else of the run in flight or in between), what a token costs
    # here: the price the finalize is judged at is measured milliseconds after it, on the
    # machine in the state it ran in (not seconds later). The finalize is a fork, so the main context
    # stays as it was for what follows. The re-reads (`cached`: what a request costs beyond its
    # prefill, a prompt all but a few tokens of which are cached; the finalize has just read the
    # context, so it is all on the device) and the finalize's like-with-like baselines: forks
    # of the main context with a suffix of the finalize's size, so the same positions are
    # prefilled; several, since noise only adds time, and the fastest counts (`baselines`).
    # The runner measures a re-read or a baseline again when its time is a range or it ran at
    # another speed than the finalize (docs/verdicts.md, "A machine that drifts").
    phase back {
      spawn 1 fork isolated label finalize {
        user filler $finalize_tokens
        reply $max_tokens
      }
      repeat 3 isolated label cached { probe }
      spawn $baselines fork isolated label baseline {
        user filler $finalize_tokens
        reply $max_tokens
      }
    }
    # After every session's finalize (nothing here can push a main context out before its
    # finalize): can a recompute be told from a hit here? Re-reads of the main context,
    # padded (a fork) to `$timing_tokens` when it is shorter: the least prompt whose cold
    # prefill on this engine is far above what a timing resolves (from the calibration, made
    # before the sessions start). An engine that recomputes what it reports cached is as slow
    # in the baseline as in the finalize, which `restore` cannot see; these show it.
    phase measure {
      spawn 1 fork isolated label reread {
        if $timing_tokens > $main_tokens {
          user filler $timing_tokens - $main_tokens
          probe label pad
        }
        repeat 3 { probe }
      }
    }
  }

  gates {
    # The engine says the main context came back from cache (reuse >= miss_threshold).
    survival: each session all(hit{finalize}) -> evicted
    # What came back must cost what a cache hit costs. Like with like: the finalize against its
    # baseline (the same main context and suffix size, cached on the device, timed alone). A
    # token costs the baseline's prefill time less a re-read's (what any request costs beyond
    # its prefill), per uncached token of the baseline: the price at the dearest positions, so
    # a generous one. The finalize may cost a re-read, its uncached tokens at ttft_ratio x that
    # price (more when its prefill_work says they sit later; the ratio for noise, so a finalize
    # that honestly recomputed a lost context is not called degraded), and less than half of
    # recomputing its cached tokens at that price; more, and what came back was paid like a
    # recompute. Never below ttft_ratio x the baseline: within that it is at most `slow`. And
    # never closer than what a timing resolves here ($timing_floor: the engine's own prefill
    # time's, else a busy host's 5 ms): a finalize and baselines that cost about nothing are
    # told apart by noise, not by the cache.
    # prefill_time is the engine's own prefill time when it reports one, else the TTFT.
    # It judges a claim, so it applies only when the finalize claims at least 10% of its prompt
    # cached. Below that, a lie about the claim (the claimed tokens recomputed: under 10% of
    # the prompt at that price) is under a sixth of what ttft_ratio allows for noise on the
    # recompute (0.75 x the 90% or more uncached): a fail could only come from the machine's
    # speed drifting between the finalize and its baselines (survival already says evicted).
    restore: each session prefill_time{finalize} < max($ttft_ratio * min(prefill_time{baseline}), min(prefill_time{cached}) + (min(prefill_time{baseline}) - min(prefill_time{cached})) / median(uncached_tokens{baseline}) * ($ttft_ratio * max(uncached_tokens{finalize}, median(uncached_tokens{baseline}) * prefill_work{finalize} / median(prefill_work{baseline})) + 0.5 * cached_tokens{finalize})) + $timing_floor when cached_tokens{finalize} >= 10% * prompt_tokens{finalize} -> degraded
    # The original's slowdown check, like with like: a warning, not a verdict. How fast a
    # cache comes back: with (almost) nothing cached nothing came back, and a whole-context
    # recompute priced from a finalize-sized suffix would only measure the drift.
    speed: each session prefill_time{finalize} < $ttft_ratio * min(prefill_time{baseline}) * max(1, uncached_tokens{finalize} / median(uncached_tokens{baseline}), prefill_work{finalize} / median(prefill_work{baseline})) + $timing_floor when cached_tokens{finalize} >= 10% * prompt_tokens{finalize} -> slow warn
    # An engine that recomputes everything it reports cached is slow in the baseline too: the
    # main context read again from the device must not take half of a cold prefill of it (of
    # the re-reads, the fastest counts: noise only adds time).
    timing: each session any(ttft_agrees{reread}) -> degraded
    main_reuse: overall fraction(hit{main, warm}) >= 90% -> main_evicted warn
  }

  report {
    main_reused: count(hit{main, warm})
    main_turns: count(prompt_tokens{main, warm})
    finalize_survival: fraction(hit{finalize}) as percent
    subs_cold: fraction(cold_ok{sub}) as percent
    isolation_wait: sum(isolation_wait{isolated}) as seconds
  }
}
