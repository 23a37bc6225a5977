workload w {
  params {
    a: int = ceil(1, 2)
    b: string = if($a > 1, "x")
    c: int = max()
    e: int = if($a, 1, 2)
  }
  session main { if $b == "x" { user "x" }; reply $a + $c + $e }
}
