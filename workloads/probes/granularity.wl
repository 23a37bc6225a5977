# probes/granularity: in what unit does the prefix cache match, and does it serve a prefix that
# different prompts share? Prompts of chosen sizes are sent cold, then again: the second send is
# served up to the cache's unit below the whole prompt (a block cache serves whole blocks, a
# token cache all but the last token). Then two prompts that share a prefix and differ after
# it. The cold sends' times price a cold prefill for the experiments after this one
# (`wl probe`, docs/probe.md). Every probe's prompt starts with a system message of its own, so
# a chat template adds no default one and they all share the same start.
workload granularity {
  doc "Cache granularity: prompts of chosen sizes sent twice, and two that share a prefix"

  params {
    sizes: tokens list = [128, 141, 154, 167, 180, 193, 206, 219, 780, 1100] in 1.. doc "prompt sizes: each is sent cold, then again"
    shared_tokens: tokens = 300 in 1.. doc "the prefix two prompts share before they differ"
    tail_tokens: tokens = 50 in 1.. doc "what follows the shared prefix in each of the two"
  }
  text shared = filler $shared_tokens
  options { temperature = 0 }
  concurrency = 1

  session main {
    for n in $sizes label size isolated {
      fresh { system filler $n; probe label cold; probe label again }
    }
    fresh isolated { system $shared, filler $tail_tokens; probe label first }
    fresh isolated { system $shared, filler $tail_tokens; probe label other }
  }

  report {
    again_cached: sum(cached_tokens{again}) as tokens
    shared_cached: sum(cached_tokens{other}) as tokens
  }
}
