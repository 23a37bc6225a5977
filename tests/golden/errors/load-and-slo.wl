workload load {
  cooldown = 2s
  warmup = -1s
  slo { ttft = 2, tpot = 50ms, e2 = 1s, attainment = 150% }
  session chat repeat 3 turns every 1s arrive every 1s { user "x"; reply 3 }
  session other repeat 2 turns every 1s concurrency 1 { user "y"; reply 3 }
}
