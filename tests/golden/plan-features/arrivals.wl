workload arrivals {
  params { rate: float = 10 }
  session steady repeat 3 arrive every 1s / $rate { user "a"; reply 4 }
  session poisson repeat 4 arrive every exponential(1s / $rate) concurrency 2 { user filler 50; reply 4 }
  session bursts repeat 5 arrive every 2s burst 2 { user "b"; reply 4 }
  session listed arrive at [0s, 1.5s] { wait 100ms; user "c"; reply 4 }
}
