workload w {
  params {
    count: integer = 3
  }
}
