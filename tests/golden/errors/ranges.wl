workload w {
  params {
    a: int = 5 in 10..1
    b: tokens = 0 in 1..
    c: int = 2.5
    d: bool = true in 0..1
  }
  session main { user filler $a + $b + $c; if $d { reply 1 } }
}
