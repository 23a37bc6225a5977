# probes/idle: does a context survive idle gaps with no other traffic? One context is filled,
# then read back after each gap in turn (each gap counted from the read before it, which a cache
# that kept the context refreshed, and one that lost it filled again). `wl probe --idle` sets the
# gaps (docs/probe.md).
workload idle {
  doc "Idle lifetime: one context read back after idle gaps of increasing length, nothing else sent"

  params {
    gaps: duration list = [1s, 10s] doc "idle gaps, each after the request before it"
    context_tokens: tokens = 1k in 16.. doc "the context's filler"
  }
  text body = filler $context_tokens
  options { temperature = 0 }
  concurrency = 1

  session main {
    fresh {
      system "Idle.", $body
      probe label fill isolated
      for g in $gaps label after isolated { wait $g; probe }
    }
  }
}
