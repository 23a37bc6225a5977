workload w {
  session main { turn t { user "hi"; reply 1 } }
  gates {
    g: overall median(ttft{t} * 2) < 1s
  }
}
