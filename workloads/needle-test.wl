# needle-test: is a needle sentence at a given depth found at each context length?
workload needle_test {
  doc "Long-context retrieval: find a needle at a depth in haystacks of growing length"

  params {
    lengths: tokens list = [50k, 100k, 200k, 300k, 450k] in 64.. doc "haystack sizes in tokens"
    needle_pos: ratio = 80% in 0..1 doc "needle depth as a fraction of the haystack"
    max_tokens: int = 128 in 1.. doc "generation budget for the answer"
    thinking: bool = false doc "ask the chat template to think"
    temperature: float = -1 doc "sampling temperature (negative: the engine's default)"
  }
  concurrency = 1
  options {
    chat_template_kwargs = if($thinking, { thinking = true }, null)
    temperature = if($temperature >= 0, $temperature, null)
  }

  session main {
    for len in $lengths label needle {
      fresh {
        system "You are a careful reader."
        user filler $len needle at $needle_pos, "\n\nOne sentence in the text above is in square brackets and starts with \"the secret code is\". Copy that sentence exactly, with its brackets."
        reply $max_tokens drop expect reply contains needle
      }
    }
  }

  gates {
    found: overall all(ok{needle}) -> not_found
  }

  report {
    needles_found: count(ok{needle})
    needles: count(prompt_tokens{needle})
  }
}
