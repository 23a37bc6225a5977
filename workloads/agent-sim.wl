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
    finalize_tokens: tokens = 2k in 1.. doc "new suffix of the back-to-main turn"
    max_tokens: int = 64 in 1.. doc "generation per turn, replayed into the next"
    miss_threshold: ratio = 66% in 0..1 doc "least reuse of the finalize turn"
    ttft_ratio: float = 1.75 in 1.. doc "finalize TTFT per uncached token vs warm main turns"
    max_concurrency: int = $sessions in 1.. doc "requests in flight at once"
    thinking: bool = false doc "let the model think (off sends reasoning_effort none)"
  }
  concurrency = $max_concurrency
  options { reasoning_effort = if($thinking, null, "none") }

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
    turn finalize {
      user filler $finalize_tokens
      reply $max_tokens
    }
  }

  gates {
    # The engine says the main context came back from cache.
    survival: each session reuse{finalize} >= $miss_threshold -> evicted
    # ...and the timing agrees. Compare like with like: the finalize's prefill time against
    # the warm baseline scaled by how much more prefill work the finalize has, counted both in
    # uncached tokens and in positions (attention makes late tokens dearer); the larger of the
    # two bounds a healthy slowdown. Never scaled down: fixed per-request costs stay.
    # prefill_time is the engine's own prefill time when it reports one (no queueing), else TTFT.
    # A warning, not a verdict: under contention timing noise can exceed the margin, and a false
    # "degraded" sends an engine team chasing ghosts. `timing` below decides "degraded".
    speed: each session prefill_time{finalize} < $ttft_ratio * median(prefill_time{main, warm, last 3}) * max(1, median(uncached_tokens{finalize}) / median(uncached_tokens{main, warm, last 3}), median(prefill_work{finalize}) / median(prefill_work{main, warm, last 3})) -> slow warn
    # A reported hit must also look like one where timing can tell: no warm request may take at
    # least half of what a cold prefill of its whole prompt costs here.
    timing: each session count(ttft_disagrees{warm}) == 0 -> degraded
    main_reuse: overall fraction(hit{main, warm}) >= 90% -> main_evicted warn
  }

  report {
    main_reused: count(hit{main, warm})
    main_turns: count(prompt_tokens{main, warm})
    finalize_survival: fraction(hit{finalize}) as percent
    subs_cold: fraction(cold_ok{sub}) as percent
  }
}
