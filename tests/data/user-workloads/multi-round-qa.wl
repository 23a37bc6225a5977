# Users arrive one after another with questions about one shared document.
workload multi_round_qa {
  doc "Multi-round QA over a shared document"
  params { users: int = 3; rounds: int = 3 }
  text document = "Context:", filler 1k
  session user repeat $users arrive every 300ms {
    system $document
    repeat $rounds label round { user filler 50, "\n\nAnd?"; reply 24; wait 50ms }
  }
}
