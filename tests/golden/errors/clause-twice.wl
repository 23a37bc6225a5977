workload w {
  doc "first"
  doc "second"
  session main {
    user "hi"
    reply 16 label a label b
  }
}
