"""The transport layer against the real llama-server (SmolLM2-135M, `-np 1 --metrics`): discovery,
the engine's tokenizer, cached-token evidence on a repeated prompt, timings, an abort, and the
/metrics counters. Skipped when the binary is not built (scripts/build-llama-server.sh)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from workloadlang.run.client import send
from workloadlang.run.discover import EngineInfo, Tokenizer, discover
from workloadlang.run.endpoint import ChatRequest, Endpoint
from workloadlang.run.metrics import PrefixCounters, delta, scrape
from workloadlang.run.sse import Outcome
from workloadlang.wire import Pool

pytestmark = pytest.mark.llama

TEXT = " ".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog near river {i}." for i in range(40))


def messages(extra: str = "") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": TEXT + extra}]


def test_llama_server_end_to_end(llama_server: Any) -> None:
    async def go() -> tuple[EngineInfo, int, PrefixCounters | None, list[Outcome], PrefixCounters | None]:
        async with httpx.AsyncClient() as client, Pool() as pool:
            info = await discover(client, llama_server.base_url)
            tok = Tokenizer.from_info(client, info)
            assert tok is not None
            n = await tok.count(TEXT)
            before = await scrape(client, info.metrics_url)
            ep = Endpoint(base_url=llama_server.base_url, model=info.model)
            opts = {"cache_prompt": True, "temperature": 0}
            cold = await send(pool, ep, ChatRequest(id="cold", messages=messages(), max_tokens=4, options=opts, deadline_s=120))
            warm = await send(pool, ep, ChatRequest(id="warm", messages=messages(), max_tokens=4, options=opts, deadline_s=120))
            cut = await send(pool, ep, ChatRequest(id="abort", messages=messages(" Write a long story."),
                                                     max_tokens=200, abort_after=3, options=opts, deadline_s=120))
            after = await scrape(client, info.metrics_url)
            return info, n, before, [cold, warm, cut], after

    info, n, before, (cold, warm, cut), after = asyncio.run(go())
    assert info.engine == "llamacpp" and info.max_context_source in ("meta.n_ctx", "/props default_generation_settings.n_ctx")
    assert info.tokenize_style == "content" and n > 100
    for out in (cold, warm):
        assert out.error is None, out.error
        assert out.ttft_s is not None and out.prompt_tokens is not None and out.prompt_tokens > n
        assert out.cached_source == "usage.prompt_tokens_details.cached_tokens"
        assert out.timings is not None and out.server_prefill_ms is not None
        assert out.suspicious == []
    assert warm.cached_tokens == warm.prompt_tokens - 1  # a full match recomputes one token
    assert cut.aborted and cut.streamed_tokens == 3 and cut.error is None
    assert before is not None and after is not None and before.family == "llamacpp"
    hits, queries, ratio = delta(before, after)
    assert queries >= cold.prompt_tokens + warm.prompt_tokens and ratio is not None and hits >= warm.cached_tokens
