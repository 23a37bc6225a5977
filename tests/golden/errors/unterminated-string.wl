workload w {
  session main {
    user "hello
    reply 1
  }
}
