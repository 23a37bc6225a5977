workload w {
  session main {
    turn t {
      user "hi"
      reply 1
  }
}
