"""Measure the embedded simulator's own overhead per request.

Starts `python -m workloadlang.sim` in a subprocess with every cost set to zero, then drives it
over loopback HTTP with N concurrent streaming clients (default 64). Reports:

* server CPU per request (user + system time of the server process / requests): the
  simulator's own cost, independent of client speed;
* server-side TTFT (`timings.ttft_ms`: request arrival to the first token written), whose p50
  at concurrency 1 is the per-request latency overhead and at 64 includes waiting for the one
  event loop behind other requests;
* the same for long growing conversations (agent-sim shape: each turn re-sends the whole
  history), to show the cost per prompt token of tokenizing, hashing and matching.

Usage: /work/venv/bin/python bench/sim_overhead.py [--streams 64] [--requests 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

import httpx

from simproc import free_port, start_sim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(port: int) -> subprocess.Popen:
    return start_sim(port, "--prefill-us-per-token", "0", "--decode-us-per-token", "0",
                     "--device-tokens", "8000000", "--max-model-len", "400000", "--slots", "256")


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i % 997}" for i in range(n))


async def stream_once(client: httpx.AsyncClient, url: str, messages: list, max_tokens: int):
    """One streamed request; returns (server ttft_ms, prompt_tokens)."""
    import json

    payload = {"messages": messages, "max_tokens": max_tokens, "stream": True,
               "stream_options": {"include_usage": True}}
    ttft, prompt = None, None
    async with client.stream("POST", url, json=payload) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and '"timings"' in line:
                chunk = json.loads(line[6:])
                ttft = chunk["timings"]["ttft_ms"]
                prompt = chunk["usage"]["prompt_tokens"]
    return ttft, prompt


async def short_requests(base: str, streams: int, requests: int, prompt_words: int,
                         max_tokens: int) -> list:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        url = f"{base}/v1/chat/completions"

        async def worker(i: int) -> list:
            out = []
            for j in range(requests):
                msgs = [{"role": "user", "content": words(f"s{i}r{j % 4}w", prompt_words)}]
                out.append(await stream_once(client, url, msgs, max_tokens))
            return out

        results = await asyncio.gather(*(worker(i) for i in range(streams)))
    return [ttft for rs in results for ttft, _ in rs]


async def growing_conversations(base: str, sessions: int, turns: int, step: int) -> list:
    async with httpx.AsyncClient(timeout=120) as client:
        url = f"{base}/v1/chat/completions"

        async def session(i: int) -> list:
            msgs = [{"role": "system", "content": "You are a helpful assistant."}]
            out = []
            for t in range(turns):
                msgs.append({"role": "user", "content": words(f"g{i}t{t}w", step)})
                ttft, prompt = await stream_once(client, url, msgs, 64)
                out.append((ttft, prompt))
                msgs.append({"role": "assistant", "content": "ok " * 64})
            return out

        results = await asyncio.gather(*(session(i) for i in range(sessions)))
    return [r for rs in results for r in rs]


def pct(values: list, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(proc: subprocess.Popen, coro_factory) -> tuple:
    cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
    result = asyncio.run(coro_factory())
    return result, cpu_seconds(proc.pid) - cpu0, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20, help="requests per stream")
    parser.add_argument("--prompt-words", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--sessions", type=int, default=3, help="growing conversations")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--step", type=int, default=5000)
    args = parser.parse_args()
    port = free_port()
    proc = start_server(port)
    base = f"http://127.0.0.1:{port}"
    try:
        for streams in (1, args.streams):
            n_req = args.requests if streams > 1 else args.requests * 5
            ttfts, cpu, wall = measure(proc, lambda: short_requests(
                base, streams, n_req, args.prompt_words, args.max_tokens))
            n = len(ttfts)
            print(f"short requests: {streams} concurrent streams x {n_req} = {n} requests, "
                  f"{args.prompt_words}-word prompts, {args.max_tokens} tokens streamed")
            print(f"  server CPU per request: {cpu / n * 1e3:.3f} ms "
                  f"(whole request: parse, template, cache, {args.max_tokens + 4} SSE events)")
            print(f"  server-side ttft_ms: p50 {statistics.median(ttfts):.3f}  "
                  f"p90 {pct(ttfts, 0.9):.3f}  p99 {pct(ttfts, 0.99):.3f}  "
                  f"max {max(ttfts):.3f}")
            print(f"  throughput: {n / wall:.0f} requests/s (client included, wall {wall:.2f} s)")
        rows, cpu, wall = measure(proc, lambda: growing_conversations(
            base, args.sessions, args.turns, args.step))
        tokens = sum(p for _, p in rows)
        print(f"growing conversations: {args.sessions} sessions x {args.turns} turns of "
              f"+{args.step} words, {tokens:,} prompt tokens in total")
        print(f"  server CPU: {cpu:.2f} s = {cpu / len(rows) * 1e3:.2f} ms per request, "
              f"{cpu / tokens * 1e9:.1f} ns per prompt token")
        last = [t for t, p in rows[args.turns - 1::args.turns]]
        print(f"  server-side ttft_ms of the last turn (~{rows[args.turns - 1][1]:,} tokens): "
              f"{', '.join(f'{t:.1f}' for t in last)}")
        print(f"  wall {wall:.2f} s (client included)")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
