# idle-resume: sessions fill their contexts, go idle for a while (a user reading, a tool
# running) while other traffic flows, then resume. Were their prefixes kept through the idle
# time, or do they pay for a full re-prefill when the user comes back?
workload idle_resume {
  doc "Sessions fill, go idle while other traffic flows, then resume: were their prefixes kept?"

  params {
    sessions: int = 4 in 1..1024 doc "sessions that fill, go idle and resume"
    fill_tokens: tokens = 16k in 1.. doc "each session's context before it goes idle"
    step_tokens: tokens = 4k in 1.. doc "growth per turn while filling"
    idle: duration = 10s doc "how long the other traffic flows while the sessions are idle"
    traffic_rate: float = 2 in 0.01.. doc "other requests per second while the sessions are idle"
    traffic_tokens: tokens = 4k in 1.. doc "each of those requests' prompt"
    max_tokens: int = 16 in 1.. doc "generation per request"
    min_reuse: ratio = 90% in 0..1 doc "least reuse of a resumed session"
  }

  session user repeat $sessions {
    system "You are a helpful assistant."
    phase fill {
      grow until $fill_tokens by $step_tokens label fill { user filler $step_tokens; reply $max_tokens }
    }
    # idle: nothing is sent until every request of the other traffic has been answered
    phase idle { }
    phase resume { user "I'm back. Where were we?"; reply $max_tokens label resume }
  }

  # Other tenants, one request after another at random gaps (about `traffic_rate` a second,
  # `idle` long), between the sessions' last turn and their resumption.
  session other {
    phase idle {
      repeat ceil($traffic_rate * $idle / 1s) label traffic {
        wait exponential(1s / $traffic_rate)
        fresh { user filler $traffic_tokens; reply $max_tokens }
      }
    }
  }

  gates {
    # Each session's whole context came back from the cache when it resumed.
    kept: each session reuse{resume, session=user} >= $min_reuse -> evicted
  }

  report {
    resumed_reuse: mean(reuse{resume}) as percent
    traffic_tokens: sum(prompt_tokens{traffic}) as tokens
  }
}
