workload w {
  session main {
    user "hi" @ "there"
  }
}
