# probes/abort: what does a cut request leave in the cache? A prompt is cut during its prefill
# (a run with `cut_prefill` set: every request gives up that long after it is sent), then sent
# again (a run without it: how much of it was kept); an answer is cut during its decode after
# `cut_tokens` streamed tokens and the conversation goes on: is the prompt kept, and what was
# generated before the cut? `wl probe` sizes the prompt so the cut falls inside its prefill
# (docs/probe.md).
workload abort {
  doc "Abort retention: a prompt cut during its prefill and an answer cut during its decode, each sent again"

  params {
    prompt_tokens: tokens = 8k in 16.. doc "the prompt cut during its prefill"
    cut_prefill: duration = 0s doc "this run only sends that prompt and gives it up this long after (0: no cut)"
    decode_tokens: tokens = 1k in 16.. doc "the prompt whose answer is cut"
    reply_tokens: int = 256 in 2.. doc "the answer asked for"
    cut_tokens: int = 16 in 1.. doc "streamed tokens before the answer is cut"
    settle: duration = 500ms doc "before the conversation goes on (the engine sees the cut)"
  }
  text prompt = filler $prompt_tokens
  text decode_prompt = filler $decode_tokens
  options { temperature = 0 }
  timeout = if($cut_prefill > 0s, $cut_prefill, 10min)
  concurrency = 1

  session main {
    if $cut_prefill > 0s {
      fresh isolated { system "Cut in prefill.", $prompt; probe label cut_prefill }
    } else {
      fresh isolated { system "Cut in prefill.", $prompt; probe label after_prefill }
      fresh isolated {
        system "Cut in decode.", $decode_prompt
        reply $reply_tokens abort after $cut_tokens label cut_decode
        wait $settle
        user "Go on."
        probe label after_decode
      }
    }
  }
}
