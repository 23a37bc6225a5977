# chat-rate: many users chat at once after one shared system prompt, each turn re-sending the
# conversation so far. The turns arrive at a rate across the users (a Poisson process); a user
# sends their next turn once the answer is in and they have thought. Does the engine answer
# within the SLOs at this rate, and how much of each turn does its prefix cache serve?
# `wl run chat-rate --sim --search rate=2..64` finds the highest rate it sustains.
workload chat_rate {
  doc "Multi-round chat at a turn rate: latency SLOs, goodput and prefix reuse under load"

  params {
    users: int = 64 in 1.. doc "conversations side by side"
    rate: float = 8 in 0.01.. doc "turns a second across the users (a Poisson process)"
    turns: int = 40 in 1.. doc "most turns a user takes (the run's length cuts the rest)"
    system_tokens: tokens = 2k in 1.. doc "the system prompt every user shares"
    question_tokens: tokens = 100 in 1.. doc "each user turn"
    answer_tokens: int = 128 in 1.. doc "each answer's generation budget (replayed)"
    think: duration = 500ms doc "mean think time after an answer (exponential)"
    length: duration = 30s in 1s.. doc "how long the run sends"
    warm: duration = 5s doc "the start left out of the metrics (caches and queues fill)"
    ttft_slo: duration = 1s in 1ms.. doc "time to first token, counted from the turn's instant"
    tpot_slo: duration = 50ms in 1ms.. doc "time per output token after the first"
    attainment: ratio = 90% in 1%..100% doc "share of turns that must meet both SLOs"
    min_hits: ratio = 90% in 0..1 doc "share of later turns served their conversation"
  }
  duration = $length
  warmup = $warm
  cooldown = 2s
  slo { ttft = $ttft_slo, tpot = $tpot_slo, attainment = $attainment }

  text system_prompt = "You are a helpful assistant. Answer the user's questions.", filler $system_tokens

  session user repeat $users turns every exponential(1s / $rate) {
    system $system_prompt
    repeat $turns label turn {
      user filler $question_tokens
      reply $answer_tokens
      wait exponential($think)
    }
  }

  gates {
    # Enough turns met both SLOs (TTFT counted from the turn's instant: a turn that went late
    # because the engine had not answered the one before it kept its user waiting).
    slo: overall fraction(slo_met{turn}) >= $attainment -> slo_missed
    # The turns went when planned: a rate the engine fell behind was a lighter load than asked.
    kept_up: overall p90(schedule_lag{turn}) < $ttft_slo -> fell_behind warn
    # A later turn found its conversation so far (and the shared prompt) in the cache.
    cached: overall fraction(hit{turn, warm}) >= $min_hits -> history_evicted warn
  }

  report {
    goodput: rate(slo_met{turn})
    turns_per_s: rate(ok{turn})
    ttft_p50: p50(ttft{turn}) as seconds
    ttft_p99: p99(ttft{turn}) as seconds
    itl_p50: p50(itl{turn}) as seconds
    itl_p99: p99(itl{turn}) as seconds
    hit_rate: sum(cached_tokens{turn}) / sum(prompt_tokens{turn}) as percent
  }
}
