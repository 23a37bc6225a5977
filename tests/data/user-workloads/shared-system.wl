# A long system prompt shared by every user: warmed once, then asked from in a second phase.
workload shared_system {
  doc "Users behind one shared system prompt"
  params { users: int = 4 in 1.. doc "users asking after the warm-up" }
  text system = "You are a helpful assistant for the Acme platform.", filler 2k
  session warm { phase prime { system $system; user "Hello."; reply 4 label prime } }
  session user repeat $users {
    phase ask { system $system; user filler 200, "\n\nWhat does this mean?"; reply 16 label ask }
  }
  gates { shared: overall reuse{ask} >= 90% -> system_prompt_evicted }
}
