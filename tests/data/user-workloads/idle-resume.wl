# A user goes idle while a Poisson flood of tenants runs, and comes back during it.
workload idle_resume_flood {
  doc "Resume a conversation in the middle of a flood"
  params { tenants: int = 8; rate: float = 20 doc "tenant arrivals a second" }
  session victim {
    phase warm { system "You are a helpful assistant."; user filler 2k; reply 8 label warm }
    phase flood { wait 300ms; user "I'm back."; reply 8 label resume }
  }
  session tenant repeat $tenants arrive every exponential(1s / $rate) {
    phase flood { user filler 1k; reply 8 label one_shot }
  }
  gates { resumed: overall reuse{resume} >= 90% -> evicted }
}
