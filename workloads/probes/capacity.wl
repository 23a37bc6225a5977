# probes/capacity: how much does the cache keep, and what goes first? By default 24 contexts are
# filled, then read back newest first until the first one the engine does not serve whole
# (cache-pressure's walk). `wl probe` runs it with `order = "given"`: contexts (a tag and the
# same filler each, so each is a prefix of its own) are sent in the order `sends` gives, a
# context's first send filling it and each later one reading it back, until the first read not
# served whole; `reads` are contexts an earlier run with the same salt filled, read back the
# same way. Answers are greedy (temperature 0), so a context's answers cold, from the device
# and restored from a host tier can be compared (docs/probe.md).
workload capacity {
  doc "Capacity and eviction order: contexts filled, then read back in a chosen order until one is not kept"

  params {
    context_tokens: tokens = 2k in 16.. doc "each context's filler"
    contexts: int = 24 in 1..4096 doc "contexts filled then read back newest first (order walk)"
    order: string = "walk" one of "walk", "given" doc "walk: fill `contexts`, read them back; given: `sends`, then `reads`"
    sends: string list = ["c0"] doc "given: contexts in the order they are sent (a first send fills, a later one reads)"
    reads: string list = ["c0"] doc "given: contexts an earlier run filled, read back in this order"
    kept: ratio = 95% in 0..1 doc "the least share of a read that counts as served whole"
    answer_tokens: int = 1 in 1.. doc "each request's greedy answer (temperature 0)"
  }
  text body = filler $context_tokens
  hit_ratio = $kept
  options { temperature = 0, seed = 0 }
  concurrency = 1

  session main {
    if $order == "walk" {
      spawn $contexts cold label fill isolated {
        system "Context."; user filler $context_tokens; probe $answer_tokens as ctx
      }
      for i in reverse 0..$contexts until miss label read isolated { resend ctx[$i] }
    } else {
      for t in $sends until miss label send isolated {
        fresh { system $t, " ", $body; probe $answer_tokens }
      }
      for t in $reads until miss label read isolated {
        fresh { system $t, " ", $body; probe $answer_tokens expect cached }
      }
    }
  }

  report {
    kept_tokens: sum(prompt_tokens{read, hit}) as tokens
  }
}
