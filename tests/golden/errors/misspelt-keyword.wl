# A misspelt keyword at the start of a workload item.
workload w {
  sesion main {
    user "hello"
    reply 16
  }
}
