workload w {
  params { n: int = celi(2.5) }
  session main { turn finalize { user filler 1k; reply $n } }
  gates {
    fast: overall medain(ttft{finalize}) < 2s
    slow: overall ttft_contnt{finalize} < 10s
  }
}
