workload w {
  session main {
    phase warmup {
      user "hi"
      reply 1 as prime
      turn finalize { user "more"; reply 1 }
    }
  }
  gates {
    a: overall count(ok{finalise}) > 0
    b: overall count(ok{phase=warmpu}) > 0
    c: overall count(ok{session=mian, label=finalize}) > 0
    d: overall count(ok{prime}) > 0
  }
}
