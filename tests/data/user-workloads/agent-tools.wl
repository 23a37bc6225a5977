# An agent that calls tools and forks two sub-agents from its conversation.
workload agent_tools {
  doc "Tool calls and forked sub-agents"
  params { agents: int = 2 }
  text tools = "Tools: grep, read_file.", filler 500
  session agent repeat $agents {
    system $tools
    user "The test test_parse fails. Fix it."
    reply 32 call grep { pattern = "def parse", path = "src/" }
    tool filler 300
    reply 32 call read_file { path = "src/parse.py" }
    tool filler 500
    spawn 2 fork parallel label sub { user "Check the callers of this function."; reply 16 }
    user "Summarise the fix."
    reply 32 label final
  }
  gates { kept: overall reuse{final} >= 90% -> context_lost }
}
