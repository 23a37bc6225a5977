# mooncake: replay a request trace (the Mooncake FAST'25 traces, or any trace converted to
# workloadlang's trace format, docs/traces.md) and compare what the engine's prefix cache served
# with what a cache should serve. Each record is a request: its prompt built block by block from
# its block ids (equal ids, equal text), sent at its time scaled by --time-scale.
# `wl plan mooncake --trace FILE --cache-tokens C` gives the unlimited and LRU(C) hit rates.
workload mooncake {
  doc "Replay a Mooncake trace: prefix-cache hits against a perfect and an LRU cache"

  params {
    trace: string doc "the trace file: Mooncake JSONL or workloadlang trace JSONL (required)"
    time_scale: float = 1 in 0.. doc "send times times this (0: as fast as the concurrency allows)"
    offset: int = 0 in 0.. doc "records of the file to skip"
    limit: int = 0 in 0.. doc "records to take after the offset (0: all)"
    sample: ratio = 100% in 0..1 doc "share of the records (of the sessions) to keep"
    block_tokens: int = 0 in 0.. doc "tokens per trace block (0: the trace's own, 512 for Mooncake); fewer scales every prompt down"
    max_tokens: int = 0 in 0.. doc "most tokens a request generates (0: its output length in the trace)"
    max_concurrency: int = 8 in 1.. doc "requests in flight at once"
  }
  concurrency = $max_concurrency

  session req trace $trace {
    time_scale = $time_scale, offset = $offset, limit = $limit, sample = $sample,
    block_tokens = $block_tokens, max_tokens = $max_tokens
  }

  gates {
    no_errors: overall count(error{req}) == 0 -> error
  }

  report {
    requests: count(prompt_tokens{req})
    hit_rate: sum(cached_tokens{req}) / sum(prompt_tokens{req}) as percent
    expected_rate: sum(expected_cached{req}) / sum(prompt_tokens{req}) as percent
  }
}
