workload agent_loop {
  params { drafts: int = 2 in 1..4 sweep [2, 3]; result: tokens = 300 }
  session agent repeat 2 {
    system "You are a coding agent. Tools: grep, read_file, edit."
    user "The test test_parse fails. Fix it."
    reply 32 replay content call grep { pattern = "def parse", path = "src/" } label plan
    tool filler 100
    assistant "Two files.", call read_file { path = "a.py" }, call read_file { path = filler 8 }
    tool filler $result
    tool filler 60
    spawn $drafts fork parallel keep longest as k label draft {
      reply 16 call edit { patch = filler 20 * ($k + 1) }
      tool "applied"
    }
    spawn 2 cold parallel label review {
      user filler 200, "\n\nReview this patch."
      spawn 2 fork parallel keep 1 label opinion { reply 8 }
      reply 8 label verdict
    }
    user "Run the tests."
    reply 16 label after
  }
  gates { kept: overall reuse{after} >= 90% -> draft_evicted }
}
