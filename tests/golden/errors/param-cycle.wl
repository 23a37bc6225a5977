workload w {
  params {
    a: int = $b + 1
    b: int = $c * 2
    c: int = $a
    d: int = $d
  }
  session main { user filler $a; reply 1 }
}
