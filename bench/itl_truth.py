"""The inter-token latency (ITL) and time per output token (TPOT) the runner records, against
the simulator's own emission times, side by side with what raw loopback sockets allow.

The simulator (its own process, `--emission-log`) keeps when each token's bytes were handed to
its socket (`GET /sim/emissions`, `time.perf_counter`: the system's monotonic clock, the one
the client stamps with). It decodes at `--decode-us` per token (the known decode step), so
each token is its own write. The runner's `Executor` sends `--streams` requests at once,
`--rounds` times, each of `--tokens` tokens, and records every gap between two token events'
arrivals (`Record.itl_s`, from the kernel's receive stamps). For every request both lists of
gaps are compared one by one:

    error = client gap - server gap

The floor: the same pacing over raw loopback sockets, no HTTP, no SSE, no event loop on the
sending side: a child process writes `--tokens` small chunks on each of `--streams`
connections at `--decode-us` apart (paced against a schedule, as the simulator is), noting
each write; this process reads them with kernel receive stamps in one thread. Its errors are
what the machine's scheduler and loopback leave whatever the client does.

Rows: the client's ITL p50 / p99 and the server's, the p50 of the two distributions apart,
the per-gap error's p50 / p90 / p99 (absolute), the TPOT p50 of both (`(e2e - ttft) /
(tokens - 1)` and `(last write - first write) / (tokens - 1)`), for the runner and for the
floor.

Usage: python -m bench.itl_truth [--streams 64] [--tokens 64] [--rounds 2] [--decode-us 10000]
       [--pin] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import selectors
import socket
import statistics
import time
from typing import Any

import httpx

from bench.harness import (
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
from workloadlang.results import ListSink, Record
from workloadlang.run.ahead import WriteAhead
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.executor import Executor
from workloadlang.stamps import CMSG_SPACE, arrival, enable
from workloadlang.wire import Pool

WORKLOAD = """
workload itl_truth {
  params { streams: int = 64; rounds: int = 2; tokens: int = 64 }
  concurrency = $streams
  session s repeat $streams {
    repeat $rounds label step { fresh { user "Tell me a story."; reply $tokens } }
  }
}
"""


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def compare(pairs: list[tuple[list[float], list[float]]]) -> dict[str, Any]:
    """Input: (client gaps, server gaps) per stream. Output: the row's figures (ms)."""
    client = [g for c, _ in pairs for g in c]
    server = [g for _, s in pairs for g in s]
    errors = [abs(c - s) for cs, ss in pairs for c, s in zip(cs, ss)]
    tpot_c = [sum(c) / len(c) for c, _ in pairs if c]
    tpot_s = [sum(s) / len(s) for _, s in pairs if s]
    ms = 1000.0
    return {"streams": len(pairs), "gaps": len(errors),
            "client_p50_ms": statistics.median(client) * ms, "client_p99_ms": pct(client, .99) * ms,
            "server_p50_ms": statistics.median(server) * ms, "server_p99_ms": pct(server, .99) * ms,
            "p50_apart_ms": abs(statistics.median(client) - statistics.median(server)) * ms,
            "error_p50_ms": statistics.median(errors) * ms, "error_p90_ms": pct(errors, .9) * ms,
            "error_p99_ms": pct(errors, .99) * ms,
            "tpot_client_p50_ms": statistics.median(tpot_c) * ms,
            "tpot_server_p50_ms": statistics.median(tpot_s) * ms}


def runner_pairs(records: list[Record], emitted: dict[str, list[float]]
                 ) -> list[tuple[list[float], list[float]]]:
    """Output: (the record's gaps, the simulator's) of every record answered in full."""
    out = []
    for r in records:
        times = emitted.get(r.id)
        if r.error is None and r.itl_s and times and len(times) == len(r.itl_s) + 1:
            out.append((list(r.itl_s), gaps(times)))
    return out


async def run_runner(base: str, root: str, streams: int, rounds: int,
                     tokens: int) -> list[tuple[list[float], list[float]]]:
    source = api.Source(name="itl_truth.wl", text=WORKLOAD)
    plan = api.make_plan(api.parse_checked(source), source,
                         {"streams": str(streams), "rounds": str(rounds),
                          "tokens": str(tokens)}, salt="bench", env={"max_context": 65536})
    sink = ListSink()
    async with Pool() as pool:
        executor = Executor(plan, Realiser(plan, RatioSizer(1.0)), WriteAhead(pool),
                            Endpoint(base_url=base, model="wl-sim"), sink)
        run = await executor.run()
    emitted = httpx.get(f"{root}/sim/emissions", timeout=30).json()["requests"]
    return runner_pairs(run.records, emitted)


# ---------------------------------------------------------------- the floor


def sender(port: int, streams: int, tokens: int, step: float, pipe: Any,
           cpus: set[int] | None) -> None:
    """Child process: connect `streams` sockets to `port`, then write `tokens` chunks on each,
    token i of every stream due at start + i * step; send back each write's time."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(streams)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pipe.recv()  # the reader is ready
    chunk = b"x" * 200
    times: list[list[float]] = [[] for _ in socks]
    start = time.perf_counter() + 0.05
    for i in range(tokens):
        delay = start + i * step - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        for k, s in enumerate(socks):
            s.sendall(chunk)
            times[k].append(time.perf_counter())
    for s in socks:
        s.close()
    pipe.send(times)


def run_floor(streams: int, tokens: int, step: float,
              cpus: set[int] | None) -> list[tuple[list[float], list[float]]]:
    """Output: (receive gaps, write gaps) per raw loopback stream (see the module)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(streams)
    mine, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(
        target=sender, args=(listener.getsockname()[1], streams, tokens, step, theirs, cpus))
    child.start()
    conns = [listener.accept()[0] for _ in range(streams)]
    sel = selectors.DefaultSelector()
    arrived: dict[int, list[float]] = {}
    for k, c in enumerate(conns):
        enable(c)
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ, k)
        arrived[k] = []
    mine.send("go")
    got = [0] * streams
    open_ = streams
    while open_:
        for key, _ in sel.select(timeout=30):
            data, anc, _, _ = key.fileobj.recvmsg(65536, CMSG_SPACE)
            if not data:
                sel.unregister(key.fileobj)
                open_ -= 1
                continue
            at = arrival(anc, time.perf_counter)
            for _ in range((got[key.data] + len(data)) // 200 - got[key.data] // 200):
                arrived[key.data].append(at)
            got[key.data] += len(data)
    sent = mine.recv()
    child.join()
    return [(gaps(arrived[k]), gaps(sent[k])) for k in range(streams)
            if len(arrived[k]) == len(sent[k])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode-us", type=int, default=10000)
    ap.add_argument("--pin", action="store_true",
                    help="the simulator (and the floor's sender) on the last CPU, this on the rest")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    client_cpus, server_cpus = split_cpus() if args.pin else (None, None)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    flags = ("--prefill-us-per-token", "0", "--slots", "1024", "--device-tokens", "8000000",
             "--decode-us-per-token", str(args.decode_us),
             "--emission-log", str(args.streams * args.rounds + 16))
    with simulator(*flags, cpus=server_cpus) as sim:
        pairs = asyncio.run(run_runner(sim.base_url, sim.root_url, args.streams, args.rounds,
                                       args.tokens))
    floor = run_floor(args.streams, args.tokens, args.decode_us / 1e6, server_cpus)
    rows = [{"case": "runner (wl run's records)", **compare(pairs)},
            {"case": "raw loopback (floor)", **compare(floor)}]
    print(f"{args.streams} streams x {args.rounds} rounds, {args.tokens} tokens each, decode "
          f"{args.decode_us / 1000:g} ms a token; {describe_machine(started)}")
    print(table(rows, [("case", "case", ""), ("gaps", "gaps", "d"),
                       ("client_p50_ms", "ITL p50", ".3f"), ("server_p50_ms", "server p50", ".3f"),
                       ("p50_apart_ms", "p50 apart", ".4f"), ("client_p99_ms", "ITL p99", ".3f"),
                       ("server_p99_ms", "server p99", ".3f"),
                       ("error_p50_ms", "|err| p50", ".4f"), ("error_p90_ms", "|err| p90", ".3f"),
                       ("error_p99_ms", "|err| p99", ".3f"),
                       ("tpot_client_p50_ms", "TPOT p50", ".3f"),
                       ("tpot_server_p50_ms", "server TPOT p50", ".3f")]))
    write_json(args.json, "itl_truth", args, rows, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
