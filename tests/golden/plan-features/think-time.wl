workload think_time {
  params { think: duration = 2s }
  session user repeat 2 {
    user "Explain prefix caching."
    reply 64
    wait exponential($think) reading 40
    user filler uniform(100, 300)
    reply 32
    wait lognormal(1s, 0.5)
    wait gamma(500ms, 2)
    user "Thanks."
    reply 8
  }
}
