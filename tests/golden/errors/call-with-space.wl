workload w {
  params {
    n: int = ceil (2.5)
  }
}
