workload w {
  session main {
    user filler 5kb
    reply 1
  }
}
