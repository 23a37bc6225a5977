# An agent that plans, tries three approaches side by side and goes on from the longest.
workload branching_agent {
  doc "Parallel forks of one plan, the longest kept"
  session main {
    system "You are a coding agent."
    user filler 2k, "\n\nPlan the change."
    reply 32 label plan
    spawn 3 fork parallel keep longest label branch {
      user "Try this approach."
      reply 16 label attempt
      repeat 2 label refine { user "Refine it."; reply 16 }
    }
    user "Now write the tests."
    reply 16 label tests
  }
  gates { kept: overall reuse{tests} >= 90% -> branch_lost }
}
