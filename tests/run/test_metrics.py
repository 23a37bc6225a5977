"""Prefix-cache counters from /metrics: each engine's names, summing over label sets, `_total`
handling, deltas, the URL rule and the auth header."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from faultserver import FaultServer
from workloadlang.run.metrics import (
    PrefixCounters,
    delta,
    metrics_url_for,
    parse_counters,
    read,
    scrape,
)

VLLM = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 500.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 150.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="qwen"} 9999.0
"""

VLLM_OLD = """\
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 64
vllm:gpu_prefix_cache_queries_created{model_name="m"} 1.7e9
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 32
"""

SGLANG = """\
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 2000
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 900
sglang:cached_tokens_total{cache_source="host",model_name="m"} 100
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.0
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 300
llamacpp:prompt_tokens_cached_total 700
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""

NINFER = """\
ninfer_prefix_cache_hit_tokens_total{source="vram_resident"} 40
ninfer_prefix_cache_hit_tokens_total{source="host_ram"} 10
ninfer_prefix_cache_query_tokens_total 100
"""


@pytest.mark.parametrize(("text", "queries", "hits", "family"), [
    (VLLM, 1500, 750, "vllm"),
    (VLLM_OLD, 64, 32, "vllm-gpu"),
    (SGLANG, 2000, 1000, "sglang"),
    (LLAMACPP, 1000, 700, "llamacpp"),
    (NINFER, 100, 50, "ninfer"),
])
def test_engine_counters(text: str, queries: int, hits: int, family: str) -> None:
    assert parse_counters(text) == PrefixCounters(queries_tokens=queries, hits_tokens=hits, family=family)


def test_unknown_or_incomplete_or_broken_text() -> None:
    assert parse_counters("# TYPE x counter\nx_total 3\n") is None
    assert parse_counters("vllm:prefix_cache_hits_total 3\n") is None  # queries missing
    assert parse_counters("llamacpp:prompt_tokens_total 5\n") is None  # cached counter missing
    assert parse_counters("this is {not prometheus\n") is None


def test_delta() -> None:
    before = PrefixCounters(queries_tokens=1000, hits_tokens=400, family="vllm")
    after = PrefixCounters(queries_tokens=3000, hits_tokens=1900, family="vllm")
    assert delta(before, after) == (1500, 2000, 0.75)
    assert delta(after, after) == (0, 0, None)
    assert delta(after, before)[2] is None  # counters went backwards: restart
    assert delta(before, after.model_copy(update={"family": "sglang"}))[2] is None


def test_metrics_url_removes_only_trailing_v1() -> None:
    assert metrics_url_for("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url_for("http://h/v1/proxy/v1/") == "http://h/v1/proxy/metrics"
    assert metrics_url_for("http://h/openai") == "http://h/openai/metrics"


def test_scrape_real_server_with_auth(fault_server: FaultServer) -> None:
    fault_server.metrics_text = VLLM

    async def go() -> PrefixCounters | None:
        async with httpx.AsyncClient() as client:
            return await scrape(client, metrics_url_for(fault_server.base_url), api_key="sk-m")

    counters = asyncio.run(go())
    assert counters == PrefixCounters(queries_tokens=1500, hits_tokens=750, family="vllm")
    seen = [r for r in fault_server.requests if r["path"] == "/metrics"][-1]
    assert seen["headers"]["authorization"] == "Bearer sk-m"


def test_scrape_failures_return_none() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            raise httpx.ConnectError("refused")
        return httpx.Response(404, text="not enabled")

    async def go() -> tuple[object, object]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await scrape(client, "http://down/metrics"), await scrape(client, "http://h/metrics")

    assert asyncio.run(go()) == (None, None)


def test_read_says_why_the_counters_are_missing() -> None:
    """`read` gives the reason a run without counters reports (instead of saying nothing)."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            raise httpx.ConnectError("refused")
        if request.url.host == "plain":
            return httpx.Response(200, text="# HELP up fine\nup 1\n")
        return httpx.Response(501, text="This server does not support metrics endpoint.")

    async def go() -> list[tuple[object, object]]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return [await read(client, f"http://{h}/metrics") for h in ("down", "h", "plain")]

    assert asyncio.run(go()) == [
        (None, "GET http://down/metrics: ConnectError"),
        (None, "GET http://h/metrics: HTTP 501"),
        (None, "GET http://plain/metrics: no prefix-cache counters this tool knows")]


def test_a_run_says_when_the_engine_s_counters_were_not_read(
        tmp_path, fault_server: FaultServer, capsys) -> None:  # noqa: F811
    """End to end on a real loopback server serving no counters this tool knows: the results
    say why (`metrics.unavailable`) and the summary says the records are not cross-checked."""
    from runhelp import wl_run_text

    fault_server.reset()
    code, res = wl_run_text(tmp_path, 'workload w { session s { user filler 300; reply 4 } }',
                            "--base-url", fault_server.base_url)
    assert code == 0
    assert res["metrics"]["unavailable"] == (
        f"start: GET {fault_server.base_url.removesuffix('/v1')}/metrics: no prefix-cache "
        "counters this tool knows")
    assert "engine counters: not read (start: GET " in capsys.readouterr().out
