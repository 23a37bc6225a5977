workload w {
  session main { turn finalize { user "hi"; reply 1 } }
  gates {
    fast: each session ttft{finalize} < 2s when cached_tokns{finalize} > 0
    slow: each session ttft{finalize} < 2s when cached_tokens{finalise} > 0
    quick: overall median(ttft{finalize}) < 1s when count(ok{finalize})
    mixed: overall median(ttft{finalize}) < 1s when fraction(hit{finalize}) > 2s
  }
}
