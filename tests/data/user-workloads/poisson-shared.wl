# Sessions arriving as a Poisson process, all on one shared 2k prompt.
workload poisson_shared {
  doc "Poisson arrivals on a shared prompt"
  params { sessions: int = 12; rate: float = 20 }
  text prompt = "You are a support agent.", filler 2k
  session s repeat $sessions arrive every exponential(1s / $rate) {
    system $prompt
    user filler 100
    reply 16 label answer
  }
}
