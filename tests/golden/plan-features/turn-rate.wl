# turns at a rate across three users, think time, a duration that cuts the last turns, windows
# and SLOs
workload turn_rate {
  params { rate: float = 2 in 0.01.. }
  duration = 6s
  warmup = 1s
  cooldown = 1s
  slo { ttft = 200ms, tpot = 20ms, attainment = 95% }
  text system_prompt = "You are a helpful assistant.", filler 40
  session user repeat 3 turns every exponential(1s / $rate) {
    system $system_prompt
    repeat 6 label turn { user filler 10; reply 8; wait 500ms }
  }
  gates { met: overall fraction(slo_met{turn}) >= 95% }
}
