# coding-agent: concurrent coding agents in a realistic loop. Every agent and sub-agent starts
# from one system prompt and tool schema; each task is a chain of tool calls whose results vary
# in size, sub-agents exploring side by side, fixes drafted side by side (the first one done is
# kept), the model reasoning at every turn (its reasoning not sent back, as agent clients do),
# tool latency and the user's think time drawn at random. Is the agent's context kept across
# its tool calls, its sub-agents and the user's pauses, and is the shared prefix served?
workload coding_agent {
  doc "Coding agents: shared prompt and tools, tool calls, parallel sub-agents and drafts: is the context kept?"

  params {
    sessions: int = 4 in 1..1024 doc "agents working at once"
    system_tokens: tokens = 3k in 1.. doc "the system prompt every agent and sub-agent starts with"
    tools_tokens: tokens = 6k in 1.. doc "the tool schema after it"
    tasks: int = 3 in 1.. doc "user requests per agent, one after another"
    task_tokens: tokens = 300 in 1.. doc "mean size of a user request (lognormal, CV 0.5)"
    search_tokens: tokens = 500 in 1.. doc "mean size of a search's result (lognormal, CV 1)"
    read_tokens: tokens = 3k in 1.. doc "mean size of a file read (lognormal, CV 1)"
    edit_tokens: tokens = 400 in 1.. doc "mean size of a patch in an edit call (lognormal, CV 0.5)"
    test_tokens: tokens = 800 in 1.. doc "mean size of a test run's output (lognormal, CV 1)"
    subagents: int = 2 in 0..16 doc "sub-agents exploring side by side per task"
    sub_tokens: tokens = 6k in 1.. doc "mean of what a sub-agent reads (lognormal, CV 1)"
    report_tokens: tokens = 300 in 1.. doc "each sub-agent's report, the result of the task call"
    drafts: int = 2 in 1..8 doc "fixes drafted side by side; the first one finished is kept"
    tool_time: duration = 300ms doc "mean tool latency (lognormal, CV 1)"
    think: duration = 5s doc "mean think time of the user between tasks (exponential)"
    max_tokens: int = 128 in 1.. doc "generation per turn"
    thinking: bool = true doc "the model reasons (reasoning_effort low; off: none)"
    min_reuse: ratio = 90% in 0..1 doc "least reuse of a turn whose context should be kept"
  }

  options { reasoning_effort = if($thinking, "low", "none") }

  # Sent byte for byte by every agent and sub-agent: the prefix they all share.
  text system_prompt = "You are a coding agent working in a git repository. Make the change the user asks for, run the tests, and report what you did.\n\n", filler $system_tokens
  text tool_schema = "Tools: grep(pattern, path), read_file(path), edit_file(path, patch), run_tests(), task(prompt).\n\n", filler $tools_tokens

  session agent repeat $sessions {
    system $system_prompt, $tool_schema
    repeat $tasks as t label task {
      user "Task: make the failing test pass.\n\n", filler lognormal($task_tokens, 0.5)
      # Each turn's reasoning stays out of the conversation (`replay content`).
      reply $max_tokens replay content call grep { pattern = "def parse", path = "src/" }
      wait lognormal($tool_time, 1)
      tool filler lognormal($search_tokens, 1)
      if $subagents > 0 {
        reply $max_tokens replay content call task { prompt = "Find every caller of parse." }
        # Sub-agents start from the shared prefix, side by side; the agent waits for all.
        spawn $subagents cold parallel as k label sub {
          system $system_prompt, $tool_schema
          user "Find every caller of parse in your part of the repository.\n\n", filler 40
          reply $max_tokens replay content call read_file { path = "src/" } label explore
          wait lognormal($tool_time, 1)
          tool filler lognormal($sub_tokens, 1)
          reply $max_tokens label explored
        }
        tool filler $report_tokens * $subagents
      }
      # Back in the agent's own context after its sub-agents (or its search).
      reply $max_tokens replay content call read_file { path = "src/parser.py" } label resume
      wait lognormal($tool_time, 1)
      tool filler lognormal($read_tokens, 1)
      spawn $drafts fork parallel keep first {
        reply $max_tokens replay content call edit_file { path = "src/parser.py", patch = filler lognormal($edit_tokens, 0.5) }
      }
      wait lognormal($tool_time, 1)
      tool "The patch applied cleanly."
      reply $max_tokens replay content call run_tests
      wait lognormal($tool_time, 1)
      tool filler lognormal($test_tokens, 1)
      reply $max_tokens replay content
      wait exponential($think)
    }
  }

  gates {
    # Every sub-agent was served the system prompt and tool schema another request had sent.
    shared: overall reuse{explore} >= $min_reuse -> shared_prefix_recomputed
    # The agent's context came back from the cache after its sub-agents ran.
    resumed: each session reuse{resume, warm} >= $min_reuse -> evicted_by_subagents
    # ... and at every other turn of its tool loop (the drafts included).
    kept: each session reuse{task, warm} >= $min_reuse -> context_evicted
  }

  report {
    resumed_reuse: mean(reuse{resume}) as percent
    shared_served: mean(cached_tokens{explore}) as tokens
    tool_loop_reuse: mean(reuse{task, warm}) as percent
  }
}
