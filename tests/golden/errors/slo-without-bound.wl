workload w {
  slo { attainment = 95% }
  session main { user "hi"; reply 1 }
}
