workload w {
  session main {
    user "a tab\there, a quote \" and a \q"
    reply 1
  }
}
