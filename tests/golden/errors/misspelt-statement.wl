workload w {
  session main {
    usr "hello"
    reply 16
  }
}
