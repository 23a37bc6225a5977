# perf-sim: prefill and generation speed against context length. Each run is a fresh
# conversation (fresh filler, so every run starts cold) that grows by steps toward the engine's
# context limit.
workload perf_sim {
  doc "Prefill and generation speed against context length"

  params {
    step_tokens: tokens = 10k in 1.. doc "growth per step"
    output_tokens: int = 256 in 1.. doc "generation per step, replayed"
    runs: int = 3 in 1.. doc "passes, each a fresh cold conversation"
    context_limit: tokens = $max_context in 1.. doc "grow toward this size (default: the engine's limit)"
    steps: int = max(0, ($context_limit - 128 - $output_tokens) // ($step_tokens + $output_tokens)) in 1.. doc "steps that fit under the limit"
    thinking: bool = false doc "let the model think (off sends reasoning_effort none)"
  }
  concurrency = 1
  options { reasoning_effort = if($thinking, null, "none"), ignore_eos = true }

  session main {
    repeat $runs as run label run {
      fresh {
        system "You are a helpful assistant."
        repeat $steps as step label level {
          user filler $step_tokens
          reply $output_tokens
        }
      }
    }
  }

  gates {
    completed: overall count(error{level}) == 0 -> incomplete
  }

  report {
    context: mean(prompt_tokens{level}) as tokens by index
    pp: mean(pp{level}) by index
    tg: mean(tg{level}) by index
  }
}
