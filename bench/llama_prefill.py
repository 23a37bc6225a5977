"""Prefill speed of llama-server builds, side by side: the engine's own prompt tokens/s for cold
prompts of a few sizes, each build in turn, round after round (so a drift of the machine's speed
falls on both).

Each server runs as the test suite runs it (SmolLM2-135M Q4_1, one slot, `-c 8192 -t 2`). Each
prompt is new text behind a system message of its own, so nothing of it is in the prompt cache;
the figure is the server's `timings.prompt_n / prompt_ms` (client time left out).

Usage: python -m bench.llama_prefill --server "NAME=PATH [OPTIONS]" [--server ...]
       [--model GGUF] [--sizes 100,500,2000] [--rounds 5] [--json PATH]
Without `--server`, the cached build (`scripts/build-llama-server.sh`) alone.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench.harness import (
    add_json_argument,
    describe_machine,
    free_port,
    machine,
    server,
    table,
    write_json,
)

CACHE = Path(os.environ.get("WL_CACHE") or Path.home() / ".cache" / "workloadlang")
WORDS = ("river stone lantern quiet orchard copper signal meadow harbor ember violet canyon "
         "thistle marble pepper window garden falcon silver ribbon").split()


@contextmanager
def llama_server(command: str, model: str) -> Iterator[str]:
    """Run `command` (a llama-server binary, then any options of its own) on `model` (one slot,
    8k context, 2 threads unless the options say otherwise) on a free loopback port while the
    block runs. Yields its root URL once `/health` answers; RuntimeError when it does not in 120 s."""
    port = free_port()
    binary, *options = shlex.split(command)
    argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "8192",
            "-np", "1", "-t", "2", "--no-webui", *options]
    with server(argv, port, binary, 120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL):
        yield f"http://127.0.0.1:{port}"


def prompt_speed(root: str, words: int, rng: random.Random) -> tuple[int, float]:
    """Input: a server's root URL, a prompt size in words. Output: (prompt tokens the server
    evaluated, its own prefill time in seconds) for a new prompt of that size."""
    system = " ".join(rng.choice(WORDS) for _ in range(8))
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
            "max_tokens": 1, "cache_prompt": True}
    r = httpx.post(root + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    t = r.json()["timings"]
    return int(t["prompt_n"]), float(t["prompt_ms"]) / 1000


def row(server: str, runs: list[tuple[int, float]]) -> dict:
    """Input: one server's (prompt tokens, prefill seconds) for one size over the rounds. Output:
    its table row: the median prompt tokens, and the median, lowest and highest tokens/s."""
    speeds = [n / seconds for n, seconds in runs]
    return {"server": server, "prompt_tokens": int(statistics.median(n for n, _ in runs)),
            "median": statistics.median(speeds), "low": min(speeds), "high": max(speeds)}


def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, run every size on every server in turn for each round, print one row per
    server and size: the median, lowest and highest tokens/s over the rounds. Output: 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", default=[], metavar="NAME=PATH [OPTIONS]",
                    help="a build to time, and any llama-server options of its own")
    ap.add_argument("--model", default=str(next(CACHE.glob("smollm2/**/*.gguf"), "")))
    ap.add_argument("--sizes", default="100,500,2000", help="prompt sizes in words")
    ap.add_argument("--rounds", type=int, default=5)
    add_json_argument(ap)
    args = ap.parse_args(argv)
    servers = dict(s.split("=", 1) for s in args.server) or {"cached": str(CACHE / "bin/llama-server")}
    paths = [args.model or "a model in the cache", *(shlex.split(c)[0] for c in servers.values())]
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise SystemExit(f"not found: {', '.join(missing)} "
                         "(bash scripts/build-llama-server.sh, or --server / --model)")
    sizes = [int(s) for s in args.sizes.split(",")]
    started = machine()
    rng = random.Random(7)
    runs: dict[tuple[str, int], list[tuple[int, float]]] = {(n, s): [] for n in servers
                                                             for s in sizes}  # (tokens, seconds)
    with ExitStack() as stack:
        roots = {n: stack.enter_context(llama_server(path, args.model)) for n, path in servers.items()}
        for _ in range(args.rounds):
            for size in sizes:
                for name, root in roots.items():
                    runs[name, size].append(prompt_speed(root, size, rng))
    rows = [row(name, runs[name, size]) for size in sizes for name in servers]
    print(f"prefill tokens/s, {args.rounds} rounds, on {describe_machine(started)}")
    print(table(rows, [("server", "server", ""), ("prompt_tokens", "prompt tokens", "d"),
                       ("median", "median", ".0f"), ("low", "low", ".0f"), ("high", "high", ".0f")]))
    write_json(args.json, "llama_prefill", args, rows, started, servers=servers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
