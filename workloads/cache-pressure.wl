# cache-pressure: how much context does the prefix cache really keep after it overflows?
# Hydrate more contexts than the advertised KV size holds, then re-send them newest-first until
# the first miss. Each context is its own cold conversation; the verify pass re-sends the exact
# bytes of each context's prompt.
workload cache_pressure {
  doc "Retained prefix-cache capacity under overflow: hydrate N contexts, verify newest-first"

  params {
    kv_size: tokens in 1.. doc "advertised KV-cache capacity in tokens (required)"
    context_tokens: tokens = 8k in 16.. doc "prompt size of each context"
    margin: int = 5 in 0.. doc "contexts hydrated beyond capacity"
    max_tokens_hydrate: int = 1 in 1.. doc "generation per hydrate request"
    max_tokens_verify: int = 1 in 1.. doc "generation per verify request"
    num_contexts: int = ceil($kv_size / ($context_tokens + $max_tokens_hydrate)) + $margin in 1.. doc "contexts to hydrate"
  }
  concurrency = 1

  # Hit/miss by TTFT when the engine does not report cached tokens: cold and cached twins of a
  # context-sized prompt with a fresh salt, repeated to separate the two with margin.
  calibrate ttft_threshold tokens $context_tokens repeat 3

  session main {
    phase hydrate {
      spawn $num_contexts cold label ctx {
        system "You are a helpful assistant."
        user filler $context_tokens
        probe $max_tokens_hydrate as ctx
      }
    }
    phase verify {
      for i in reverse 0..$num_contexts until miss label verify {
        resend ctx[$i] max_tokens $max_tokens_verify
      }
    }
  }

  gates {
    no_errors: overall count(error{verify}) == 0 -> error
    overflowed: overall sum(prompt_tokens{ctx}) > $kv_size -> not_overflowed warn
    retained: overall sum(prompt_tokens{verify, hit}) >= $kv_size -> below_capacity warn
  }

  report {
    retained_contexts: count(hit{verify})
    retained_tokens: sum(prompt_tokens{verify, hit}) as tokens
    retained_pct: sum(prompt_tokens{verify, hit}) / $kv_size as percent
    hydrated_tokens: sum(prompt_tokens{ctx}) as tokens
  }
}
