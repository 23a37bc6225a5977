workload w {
  params {
    n: int = 2
    n: int = 3
  }
  options { seed = 1, seed = 2 }
  session main {
    user "hi"
    reply $n as first
    reply $n as first
  }
  session main { user "again"; reply 1 }
  gates {
    ok: overall count(ok{session=main}) > 0
    ok: overall count(ok{session=main}) > 1
  }
  report {
    turns: count(ok{session=main})
    turns: count(hit{session=main})
  }
}
