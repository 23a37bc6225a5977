# abort-sim: stream a long thinking turn, close the connection mid-way, then send the next
# prompt that replays the partial turn. Is the aborted request's prefix (and its partial turn)
# reused?
workload abort_sim {
  doc "Prefix survival after a mid-thinking abort"

  params {
    context_tokens: tokens = 40k in 1.. doc "prime context size"
    thinking_tokens: int = 500 in 1.. doc "abort after this many streamed tokens"
    max_tokens: int = 32768 in 1.. doc "generation budget of the prime"
    reprompt_max_tokens: int = 1 in 1.. doc "generation of the re-prompt"
    reprompt_mode: string = "branch" one of "branch", "continuation" doc "branch adds a user turn; continuation ends on the partial turn"
    runs: int = 2 in 1.. doc "independent runs, each with its own context"
    min_reuse: ratio = 95% in 0..1 doc "least reuse of the re-prompt"
    settle: duration = 500ms in 0s.. doc "pause after the abort so the server sees the disconnect"
    ignore_eos: bool = false doc "ask the engine not to stop early (llama.cpp, vLLM): a small model may finish before the abort point"
  }
  concurrency = 1
  options { reasoning_effort = "xhigh", ignore_eos = if($ignore_eos, true, null) }

  session main {
    for run in 0..$runs label run {
      fresh {
        system "You are a helpful assistant."
        user filler $context_tokens, "\n\nTwelve coins look identical, but one is counterfeit and is either lighter or heavier than the others. With a balance scale and only three weighings, find the counterfeit coin and tell whether it is lighter or heavier. Justify the strategy, argue why two weighings cannot be enough, and think through the full decision tree."
        reply $max_tokens abort after $thinking_tokens label prime
        wait $settle
        if $reprompt_mode == "branch" {
          user "Step back. Set the decision tree aside, state the most important insight so far in one or two sentences, and sketch a completely different approach."
        }
        probe $reprompt_max_tokens label reprompt
      }
    }
  }

  gates {
    aborted: overall all(aborted{prime}) -> not_aborted
    reuse: overall reuse{reprompt} >= $min_reuse -> prefix_lost
    partial_kept: overall missed{reprompt} <= $thinking_tokens / 2 -> partial_lost warn
  }

  report {
    runs_ok: count(hit{reprompt})
    mean_reuse: mean(reuse{reprompt}) as percent
  }
}
