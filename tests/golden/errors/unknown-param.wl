workload w {
  params {
    step_tokens: tokens = 5k in 1.. doc "growth per turn"
  }
  session main {
    grow until 50k by $step_tokens {
      user filler $step_tokns
      reply 64
    }
  }
}
