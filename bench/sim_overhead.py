"""What the embedded simulator itself costs per request, with every modelled cost at zero.

Starts `python -m workloadlang.sim` in its own process (prefill and decode cost 0, an 8M-token
device, 256 slots) and drives it over loopback with httpx:

* short streamed requests (`--prompt-words` words, `--max-tokens` tokens, `include_usage`) at 1
  stream (5 x `--requests` requests) and at `--streams` concurrent streams (`--requests` each);
* `--sessions` growing conversations of `--turns` turns of +`--step` words, each turn re-sending
  the whole history with a 64-token reply replayed (agent-sim's shape): the cost per prompt
  token of tokenizing, hashing and matching.

Reported per scenario: server CPU per request (user + system time of the simulator's process
over the requests) and the simulator's own `timings.ttft_ms` (the request's bytes reached its
socket, by the kernel's stamp -> the first token generated): at 1 stream its per-request
latency, at 64 streams also the wait behind the other requests on its one event loop.

Usage: python -m bench.sim_overhead [--streams 64] [--requests 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.harness import (
    Sim,
    add_json_argument,
    describe_machine,
    machine,
    pct,
    simulator,
    table,
    write_json,
)

SIM_FLAGS = ("--prefill-us-per-token", "0", "--decode-us-per-token", "0",
             "--device-tokens", "8000000", "--max-model-len", "400000", "--slots", "256")


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i % 997}" for i in range(n))


async def stream_once(client: httpx.AsyncClient, url: str, messages: list,
                      max_tokens: int) -> tuple[float, int]:
    """One streamed request. Output: (the simulator's ttft_ms, prompt tokens)."""
    payload = {"messages": messages, "max_tokens": max_tokens, "stream": True,
               "stream_options": {"include_usage": True}}
    ttft, prompt = None, None
    async with client.stream("POST", url, json=payload) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and '"timings"' in line:
                chunk = json.loads(line[6:])
                ttft = chunk["timings"]["ttft_ms"]
                prompt = chunk["usage"]["prompt_tokens"]
    if ttft is None or prompt is None:
        raise RuntimeError("the simulator's stream ended without timings and usage")
    return ttft, prompt


async def short_requests(base: str, streams: int, requests: int, prompt_words: int,
                         max_tokens: int) -> list[tuple[float, int]]:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        url = f"{base}/chat/completions"

        async def worker(i: int) -> list[tuple[float, int]]:
            out = []
            for j in range(requests):
                msgs = [{"role": "user", "content": words(f"s{i}r{j % 4}w", prompt_words)}]
                out.append(await stream_once(client, url, msgs, max_tokens))
            return out

        results = await asyncio.gather(*(worker(i) for i in range(streams)))
    return [r for rs in results for r in rs]


async def growing_conversations(base: str, sessions: int, turns: int,
                                step: int) -> list[tuple[float, int]]:
    async with httpx.AsyncClient(timeout=120) as client:
        url = f"{base}/chat/completions"

        async def session(i: int) -> list[tuple[float, int]]:
            msgs = [{"role": "system", "content": "You are a helpful assistant."}]
            out = []
            for t in range(turns):
                msgs.append({"role": "user", "content": words(f"g{i}t{t}w", step)})
                out.append(await stream_once(client, url, msgs, 64))
                msgs.append({"role": "assistant", "content": "ok " * 64})
            return out

        results = await asyncio.gather(*(session(i) for i in range(sessions)))
    return [r for rs in results for r in rs]


def measure(sim: Sim, scenario: str,
            run: Callable[[], Awaitable[list[tuple[float, int]]]]) -> dict[str, Any]:
    """Run one scenario. Output: its row: requests, prompt tokens, server CPU per request and
    per prompt token, the simulator's ttft_ms p50 / p90 / p99 / max and requests/s."""
    cpu0, t0 = sim.cpu_seconds(), time.perf_counter()
    rows = asyncio.run(run())
    cpu, wall = sim.cpu_seconds() - cpu0, time.perf_counter() - t0
    ttfts = [t for t, _ in rows]
    tokens = sum(p for _, p in rows)
    return {"scenario": scenario, "requests": len(rows), "prompt_tokens": tokens,
            "server_cpu_ms_per_request": cpu / len(rows) * 1e3,
            "server_cpu_ns_per_prompt_token": cpu / tokens * 1e9,
            "ttft_ms_p50": statistics.median(ttfts), "ttft_ms_p90": pct(ttfts, 0.9),
            "ttft_ms_p99": pct(ttfts, 0.99), "ttft_ms_max": max(ttfts),
            "requests_per_s": len(rows) / wall}


COLUMNS = [("scenario", "scenario", ""), ("requests", "requests", "d"),
           ("server_cpu_ms_per_request", "server CPU ms/req", ".3f"),
           ("server_cpu_ns_per_prompt_token", "ns/prompt token", ".0f"),
           ("ttft_ms_p50", "ttft p50", ".2f"), ("ttft_ms_p90", "p90", ".2f"),
           ("ttft_ms_p99", "p99", ".2f"), ("ttft_ms_max", "max", ".2f"),
           ("requests_per_s", "req/s", ".0f")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20, help="requests per stream")
    ap.add_argument("--prompt-words", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--sessions", type=int, default=3, help="growing conversations")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--step", type=int, default=5000, help="words added a turn")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    rows = []
    with simulator(*SIM_FLAGS) as sim:
        for streams in (1, args.streams):
            n = args.requests if streams > 1 else args.requests * 5
            rows.append(measure(sim, f"{streams} stream(s), {args.prompt_words}-word prompts",
                                lambda streams=streams, n=n: short_requests(
                                    sim.base_url, streams, n, args.prompt_words,
                                    args.max_tokens)))
        rows.append(measure(sim, f"{args.sessions} growing conversations x {args.turns} turns",
                            lambda: growing_conversations(sim.base_url, args.sessions,
                                                          args.turns, args.step)))
    print(table(rows, COLUMNS))
    last = rows[-1]
    print(f"growing conversations: {last['prompt_tokens']:,} prompt tokens in all")
    write_json(args.json, "sim_overhead", args, rows, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
