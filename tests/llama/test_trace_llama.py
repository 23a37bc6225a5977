"""A Mooncake trace slice replayed on a real engine: llama-server (SmolLM2-135M, one slot).

The committed slice (tests/data/mooncake) scaled down to this machine's sizes: each 512-token
block of the trace becomes 8 tokens (a 12k-token prompt about 200), generation capped at 4
tokens, sent in the trace's order one at a time. The prompts are sized with the engine's own
tokenizer (a block alone; joined, a block's first word costs a token less here and there),
so what it counts is about what the plan says plus its chat template's own (a default system
prompt: the same for every request). These records share their first block and little
else within 12 requests: each request after the first finds it in the engine's prompt cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runhelp import wl_run

pytestmark = pytest.mark.llama

SLICE = Path(__file__).parents[1] / "data" / "mooncake" / "conversation_1000.jsonl"


def test_a_scaled_down_trace_slice_replays_on_llama_server(tmp_path, llama_server):
    code, res = wl_run(tmp_path, "mooncake", "--base-url", llama_server.base_url,
                       "--trace", str(SLICE), "--limit", "12", "--block-tokens", "8",
                       "--max-tokens", "4", "--time-scale", "0", "--max-concurrency", "1",
                       "--salt", "llama-trace", "--cache-tokens", "8k", "--cache-block", "16")
    assert code == 0, res.get("gates")
    recs = sorted(res["records"], key=lambda r: r["t_start_s"])
    assert [r["index"] for r in recs] == list(range(12))  # in the trace's order
    assert all(r["error"] is None and r["cached_source"] != "none" for r in recs)
    for r in recs:
        assert abs(r["prompt_tokens"] - r["planned_prompt_tokens"]) <= \
            0.05 * r["planned_prompt_tokens"] + 25, r
    # the shared first block (8 tokens after the user header) comes back from the cache, with
    # the template's own system prompt before it
    assert all(r["planned_expected_cached"] == 11 for r in recs[1:])
    assert all(r["cached_tokens"] >= 11 for r in recs[1:]), [r["cached_tokens"] for r in recs]
    theory = res["cache_theory"]
    assert theory["requests"] == 12 and theory["measured"] > 0
