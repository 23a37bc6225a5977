"""What the runner's client adds to the TTFT it records, against the simulator in its own
process with zero prefill cost.

For every request:

    overhead = client TTFT  (what `wl run` records: just before the request is written -> the
                             bytes of the first non-empty delta reached the client's socket)
             - server TTFB  (the simulator's `timings.ttfb_ms`: the request's bytes reached its
                             socket -> the first token's bytes written to the socket)

"Reached the socket" is the kernel's receive stamp on both sides, so what is left is the
client's send path and the two loopback hops, and neither side's busy event loop moves the
split. The executor keeps every request's `Outcome` (`Executor.outcomes`), which carries both;
nothing in the client is instrumented.

Modes (`--mode`):
  executor  the runner's `Executor` on a generated plan: N sessions (`concurrency = N`), each
            `--rounds` short turns with `--max-tokens`-token replies: exactly what `wl run`
            records. A second row leaves out each session's first turn (all sessions start
            together, so their first requests reach the simulator at once).
  send      `workloadlang.run.client.send` alone, N at a time in lock-step rounds: every round
            is a burst of N requests leaving at the same instant.

The simulator decodes at `--decode-us` per token (default 10 ms, so that 64 streams are really
in flight together); `--decode-us 0` saturates the client and the simulator instead. `--pin`
runs the simulator on the last CPU and this client on the others, so that the figure is the
client's and not the scheduler's interleaving of two busy processes. `--transport httpcore` runs
the same over httpx's default connection pool (the https path: each request sent at its turn),
for comparison. Also reported: the client's CPU
time per request (user + system of this process over the measured requests: both its threads),
the executor's own client health (`results.client`), and how many overheads over 1 ms carry a
first-token bound (`ttft_late_s`) that covers them: in executor mode every one should (the
bound covers a first token read late; in `send` mode a request written late is not flagged).

`--against DIR` compares this checkout's client with another checkout's (e.g. a worktree of
main: `git worktree add /tmp/main-ref main`) in one run: one simulator, then `--repeat` turns
in which each checkout runs the executor cases in a process of its own (`python -m
bench.client_overhead --base-url ...` in its folder), the two alternating (A B, B A, ...). The
table gives each checkout's median over the turns of each figure, side by side.

Usage: python -m bench.client_overhead [--streams 1,64] [--rounds 20] [--mode executor|send|both]
       [--max-tokens 32] [--decode-us 10000] [--pin] [--transport wire|httpcore] [--profile]
       [--base-url URL] [--against DIR [--repeat 3]] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

import httpx

from bench.harness import (
    ROOT,
    add_json_argument,
    describe_machine,
    machine,
    pct,
    simulator,
    split_cpus,
    table,
    write_json,
)
from workloadlang import api
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run.ahead import WriteAhead
from workloadlang.run.client import send
from workloadlang.run.endpoint import ChatRequest, Endpoint
from workloadlang.run.executor import Executor
from workloadlang.run.pacing import InTurn
from workloadlang.run.sse import Outcome
from workloadlang.wire import HttpxTransport, Pool

WORKLOAD = """
workload overhead {
  params { streams: int = 64; rounds: int = 40; max_tokens: int = 16 }
  concurrency = $streams
  session s repeat $streams {
    repeat $rounds label step { fresh { user "Say something short."; reply $max_tokens } }
  }
}
"""

SIM_FLAGS = ("--prefill-us-per-token", "0", "--device-tokens", "8000000", "--slots", "256")

# (client TTFT s, server TTFB ms, first-token bound s or None, the way back ms or None)
Sample = tuple[float, float, float | None, float | None]


def client(transport: str) -> Pool | HttpxTransport:
    """`wire`: the wire client's pool, what `wl run` sends http:// chat requests through;
    `httpcore`: httpx's default client and connection pool (the https path), for comparison."""
    if transport == "httpcore":
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=1024)
        return HttpxTransport(httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits))
    return Pool()


def pacing(c: Pool | HttpxTransport) -> WriteAhead | InTurn:
    """What `wl run` paces requests with over `c`."""
    return WriteAhead(c) if isinstance(c, Pool) else InTurn(c)


def warm(i: int, max_tokens: int) -> ChatRequest:
    return ChatRequest(id=f"warm/{i}", messages=[{"role": "user", "content": "warm up"}],
                       max_tokens=max_tokens)


def samples(outcomes: Iterable[Outcome]) -> list[Sample]:
    """Output: (ttft_s, the server's time to first byte in ms, ttft_late_s, the way back in
    ms) of every outcome without error that has both times (the server's TTFT where it reports
    no `ttfb_ms`). The way back runs on the wall clock both processes share, from the
    simulator's first token (`first_token_unix`) to its arrival at the client (None when the
    server does not say when): the rest of an overhead is the way there, the send."""
    out = []
    for o in outcomes:
        timings = o.timings or {}
        server_ms = timings.get("ttfb_ms", o.server_ttft_ms)
        if o.error is None and o.ttft_s is not None and server_ms is not None:
            first = timings.get("first_token_unix")
            back = (o.t_send_unix + o.ttft_s - first) * 1000 if first else None
            out.append((o.ttft_s, server_ms, o.ttft_late_s, back))
    return out


async def run_executor(base: str, streams: int, rounds: int, max_tokens: int,
                       transport: str) -> tuple[list[Sample], list[Sample], dict, float]:
    """Output: samples of every request, of the requests after each session's first, the
    executor's client health and the client's CPU seconds over the run."""
    source = api.Source(name="overhead.wl", text=WORKLOAD)
    plan = api.make_plan(api.parse_checked(source), source,
                         {"streams": str(streams), "rounds": str(rounds),
                          "max_tokens": str(max_tokens)}, salt="bench",
                         env={"max_context": 65536})
    endpoint = Endpoint(base_url=base, model="wl-sim")
    async with client(transport) as c:
        # one connection per stream, as a long run has after its first round
        await asyncio.gather(*(send(c, endpoint, warm(i, max_tokens)) for i in range(streams)))
        executor = Executor(plan, Realiser(plan, RatioSizer(1.0)), pacing(c), endpoint,
                            ListSink())
        cpu0 = time.process_time()
        run = await executor.run()
        cpu = time.process_time() - cpu0
    outcomes = executor.outcomes
    later = [outcomes[r.id] for r in run.records if r.index and r.id in outcomes]
    return samples(outcomes.values()), samples(later), run.client, cpu


async def run_send(base: str, streams: int, rounds: int, max_tokens: int,
                   transport: str) -> tuple[list[Sample], list[Sample], dict, float]:
    """Output: samples of every request, none apart, no health, the client's CPU seconds."""
    endpoint = Endpoint(base_url=base, model="wl-sim")
    outs = []
    async with client(transport) as c:
        await asyncio.gather(*(send(c, endpoint, warm(i, max_tokens)) for i in range(streams)))
        cpu0 = time.process_time()
        for k in range(rounds):
            reqs = [ChatRequest(id=f"r{k}/{i}", max_tokens=max_tokens,
                                messages=[{"role": "user", "content": f"Say something {k} {i}."}])
                    for i in range(streams)]
            outs += await asyncio.gather(*(send(c, endpoint, r) for r in reqs))
        cpu = time.process_time() - cpu0
    return samples(outs), [], {}, cpu


def flags_cover(rows: list[Sample], over_ms: float = 1.0) -> dict[str, Any]:
    """The first-token bound (`ttft_late_s`) against the overheads: how many are over
    `over_ms`, how many of those carry a bound that covers the excess (a first token read
    late says so), how many flagged ones were within `over_ms` after all (the bound is an upper
    bound, not the error), and the largest not covered, split into the way there and back."""
    over = covered = flagged = loose = 0
    missed = []
    for ttft_s, server_ms, late_s, back in rows:
        extra = ttft_s * 1000 - server_ms
        flagged += late_s is not None
        if extra > over_ms:
            over += 1
            if late_s is not None and extra - over_ms <= late_s * 1000:
                covered += 1
            else:
                missed.append((extra, back))
        elif late_s is not None:
            loose += 1
    worst = [f"{e:.1f} ms" + (f" (there {e - b:.1f} + back {b:.1f})" if b is not None else "")
             for e, b in sorted(missed, reverse=True)[:5]]
    return {"over_1ms": over, "over_1ms_covered": covered, "flagged": flagged,
            "flagged_within_1ms": loose, "not_covered": worst}


def summarise(case: str, rows: list[Sample], health: dict, cpu_s: float) -> dict[str, Any]:
    """Output: one table row: the overhead's p50 / p90 / p99 / max (ms), the simulator's TTFB
    p50 / p99, the client's CPU per request, the flags' cover and the executor's health."""
    over = [t * 1000 - s for t, s, _, _ in rows]
    server = [s for _, s, _, _ in rows]
    return {"case": case, "n": len(rows),
            "overhead_p50_ms": statistics.median(over), "overhead_p90_ms": pct(over, 0.9),
            "overhead_p99_ms": pct(over, 0.99), "overhead_max_ms": max(over),
            "server_ttfb_p50_ms": statistics.median(server), "server_ttfb_p99_ms": pct(server, 0.99),
            "client_cpu_ms_per_request": cpu_s * 1000 / len(rows) if cpu_s else None,
            **flags_cover(rows), "health": health}


COLUMNS = [("case", "case", ""), ("n", "n", "d"), ("overhead_p50_ms", "overhead p50", ".3f"),
           ("overhead_p90_ms", "p90", ".3f"), ("overhead_p99_ms", "p99", ".3f"),
           ("overhead_max_ms", "max", ".3f"), ("client_cpu_ms_per_request", "client CPU ms/req", ".2f"),
           ("server_ttfb_p50_ms", "server ttfb p50", ".3f"), ("server_ttfb_p99_ms", "p99", ".2f"),
           ("over_1ms", "over 1 ms", "d"), ("over_1ms_covered", "covered", "d")]

HEALTH = ("loop_lag_p99_ms", "loop_lag_max_ms", "client_delay_p99_ms", "client_delay_max_ms",
          "ttft_late", "gc_pause_max_ms")


def measure(base: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every stream count and mode of `args`, one after the other. Output: the table's rows."""
    out = []
    modes = ["executor", "send"] if args.mode == "both" else [args.mode]
    for streams in (int(s) for s in args.streams.split(",")):
        for mode in modes:
            fn = run_executor if mode == "executor" else run_send
            rows, later, health, cpu = asyncio.run(
                fn(base, streams, args.rounds, args.max_tokens, args.transport))
            out.append(summarise(f"{mode} x{streams}", rows, health, cpu))
            if mode == "executor" and streams > 1:
                out.append(summarise(f"  after 1st turn x{streams}", later, {}, 0.0))
    return out


def profile(base: str, args: argparse.Namespace) -> None:
    """cProfile the 64-stream executor case (this process: the client) and print the 25
    functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(run_executor(base, 64, args.rounds, args.max_tokens, args.transport))
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print(text.getvalue())


SIDE = ("overhead_p50_ms", "overhead_p90_ms", "overhead_p99_ms", "client_cpu_ms_per_request")


def run_checkout(checkout: str, base: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run this bench's executor cases from `checkout`'s folder (its own code: the folder comes
    first on `sys.path`) against the simulator at `base`, in a process of its own. Output: its
    table's rows."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        subprocess.run([sys.executable, "-m", "bench.client_overhead", "--base-url", base,
                        "--streams", args.streams, "--rounds", str(args.rounds),
                        "--max-tokens", str(args.max_tokens), "--mode", "executor",
                        "--json", out], cwd=checkout, check=True, stdout=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as f:
            return json.load(f)["rows"]


def side_by_side(base: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """`--against`: the executor cases run by the other checkout and by this one, alternating,
    `--repeat` times each. Output: one row per case with each side's median figures
    (`other_*`: the `--against` checkout; `this_*`: this one)."""
    sides = {"other": os.path.abspath(args.against), "this": str(ROOT)}
    runs: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in sides}
    for turn in range(args.repeat):
        order = list(sides) if turn % 2 == 0 else list(reversed(sides))  # A B, B A, A B, ...
        for side in order:
            runs[side].append(run_checkout(sides[side], base, args))
            print(f"turn {turn + 1}/{args.repeat}: {side} ({sides[side]}) done", file=sys.stderr)
    rows = []
    for i, first in enumerate(runs["this"][0]):
        row: dict[str, Any] = {"case": first["case"], "n": first["n"]}
        for side in sides:
            for key in SIDE:
                values = [r[i][key] for r in runs[side] if r[i].get(key) is not None]
                row[f"{side}_{key}"] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def side_columns(other: str) -> list[tuple[str, str, str]]:
    cols = [("case", "case", ""), ("n", "n", "d")]
    for key, head in zip(SIDE, ("p50", "p90", "p99", "CPU ms/req")):
        cols += [(f"other_{key}", f"{other} {head}", ".3f"), (f"this_{key}", f"this {head}", ".3f")]
    return cols


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,64", help="comma-separated stream counts")
    ap.add_argument("--rounds", type=int, default=20, help="requests per stream")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--decode-us", type=float, default=10000,
                    help="the simulator's decode cost per token (prefill is always 0)")
    ap.add_argument("--mode", choices=["executor", "send", "both"], default="both")
    ap.add_argument("--pin", action="store_true",
                    help="run the simulator on the last CPU and this client on the others")
    ap.add_argument("--transport", choices=["wire", "httpcore"], default="wire",
                    help="wire: what wl run uses; httpcore: httpx's default pool, for comparison")
    ap.add_argument("--profile", action="store_true", help="cProfile the 64-stream executor case")
    ap.add_argument("--base-url", help="an OpenAI base URL of a running simulator to use instead")
    ap.add_argument("--against", metavar="DIR",
                    help="another checkout to compare with, side by side in this one run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="with --against: turns of each checkout (default: %(default)s)")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    sim_cpus = None
    if args.pin and not args.base_url:
        mine, sim_cpus = split_cpus()
        os.sched_setaffinity(0, mine)  # this process and the threads it starts from now on
    running = (nullcontext(None) if args.base_url else
               simulator(*SIM_FLAGS, "--decode-us-per-token", str(args.decode_us), cpus=sim_cpus))
    with running as sim:
        base = args.base_url.rstrip("/") if args.base_url else sim.base_url
        if args.against:
            rows = side_by_side(base, args)
            print(table(rows, side_columns(os.path.basename(os.path.abspath(args.against)))))
            write_json(args.json, "client_overhead", args, rows, started)
            return 0
        rows = measure(base, args)
        print(table(rows, COLUMNS))
        for row in rows:
            if row["health"]:
                print(f"{row['case'].strip()}: client health "
                      + ", ".join(f"{k} {row['health'].get(k)}" for k in HEALTH))
            if row["health"] and row["over_1ms"] != row["over_1ms_covered"]:
                # a late read of the first token is flagged; a late write is not a read
                print(f"{row['case'].strip()}: {row['over_1ms'] - row['over_1ms_covered']} "
                      "overheads over 1 ms without a first-token bound that covers them; the "
                      "largest: " + ", ".join(row["not_covered"]))
        if args.profile:
            profile(base, args)
    write_json(args.json, "client_overhead", args, rows, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
