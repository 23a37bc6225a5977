# tenant-flood: one long session (the victim) grows turn by turn while one-shot tenants arrive
# at random (a Poisson process) with prompts of their own. Does the victim's context survive
# the flood, or does every tenant push part of it out of the cache?
workload tenant_flood {
  doc "A long session growing while one-shot tenants arrive: does its context survive the flood?"

  params {
    victim_tokens: tokens = 32k in 1.. doc "the victim's new tokens over its turns"
    step_tokens: tokens = 2k in 1.. doc "the victim's growth per turn"
    think: duration = 1s doc "the victim's pause between turns, while tenants arrive"
    rate: float = 4 in 0.001.. doc "tenant arrivals per second (Poisson)"
    tenants: int = 64 in 1.. doc "one-shot tenants"
    tenant_tokens: tokens = 4k in 1.. doc "each tenant's prompt"
    max_tokens: int = 16 in 1.. doc "generation per request"
    min_reuse: ratio = 90% in 0..1 doc "least reuse of each victim turn"
  }

  session victim {
    system "You are a helpful assistant."
    grow until $victim_tokens by $step_tokens label grow {
      user filler $step_tokens
      reply $max_tokens
      wait $think
    }
  }

  session tenant repeat $tenants arrive every exponential(1s / $rate) {
    user filler $tenant_tokens
    reply $max_tokens label flood
  }

  gates {
    # Every turn of the victim after its first found the conversation so far in the cache.
    kept: overall reuse{grow, warm} >= $min_reuse -> victim_evicted
    # The flood came when planned (a late flood is a lighter load than asked for).
    on_time: overall p99(schedule_lag{flood}) < 50ms warn
  }

  report {
    victim_reuse: min(reuse{grow, warm}) as percent
    flood_tokens: sum(prompt_tokens{flood}) as tokens
  }
}
