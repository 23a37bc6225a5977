# shared-prompt: concurrent sessions share one long system prompt (a named text), then each
# grows a private history. Is the shared prompt prefilled once and served from the cache to
# every other session, and does each session's own history stay cached as it grows?
workload shared_prompt {
  doc "Concurrent sessions sharing a long system prompt: computed once, and private histories kept?"

  params {
    sessions: int = 8 in 2..1024 doc "concurrent sessions sharing the system prompt"
    system_tokens: tokens = 8k in 1.. doc "size of the shared system prompt"
    turn_tokens: tokens = 1k in 1.. doc "each session's own new text per turn"
    turns: int = 4 in 1.. doc "private turns after the opening one"
    max_tokens: int = 32 in 1.. doc "generation per turn, replayed into the next"
    min_reuse: ratio = 90% in 0..1 doc "least reuse of the shared prefix and of a private turn"
  }

  # One text for every session: the same bytes wherever it is sent.
  text system_prompt = "You are a careful assistant. Follow the policy below.\n\n", filler $system_tokens

  session user repeat $sessions {
    system $system_prompt
    # The first session opens alone; the others join once it has been answered, so the shared
    # prompt is certainly in the cache when they send it (a phase is a barrier).
    if $copy == 0 {
      phase lead { user filler $turn_tokens; reply $max_tokens label opening }
    }
    phase chat {
      if $copy > 0 { user filler $turn_tokens; reply $max_tokens label joined }
      repeat $turns label private { user filler $turn_tokens; reply $max_tokens }
    }
  }

  gates {
    # Every session after the first found the shared prompt in the cache.
    shared: overall reuse{joined} >= $min_reuse -> shared_prefix_recomputed
    # Each session's history came back from the cache at every private turn.
    private: each session reuse{private} >= $min_reuse -> history_lost
  }

  report {
    shared_reused: mean(cached_tokens{joined}) as tokens
    private_hits: fraction(hit{private}) as percent
  }
}
