workload w {
  session main { turn t { user "hi"; reply 1 } }
  gates {
    found: overall count(ok{t})
    quick: overall all(ttft{t})
    mixed: overall fraction(hit{t}) > 2s
  }
}
