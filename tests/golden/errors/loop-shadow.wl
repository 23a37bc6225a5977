workload w {
  params { n: int = 3 }
  session main {
    repeat $n as n {
      for i in 0..$n { user filler 100 * $i; reply 1 }
      user filler 100 * $i
    }
  }
}
