"""Measure the runner's client overhead on TTFT: what the client adds on top of the server.

Starts `python -m workloadlang.sim` in a SEPARATE process with zero prefill cost (and a decode
cost, `--decode-us`, so that 64 streams are really in flight at once; `--decode-us 0` instead
measures a saturated client+server pair), then drives it with the runner's own code at 1 and
64 concurrent streams. For every request:

    overhead = client TTFT (what `wl run` records: just before the request is sent -> the
               first non-empty delta's bytes reached the client's socket, monotonic clock)
             - server time to first byte (the simulator's `timings.ttfb_ms`: the request's
               bytes reached its socket -> the first token's bytes written to the socket)

so it holds the client's send path (pool checkout, request write) and the two loopback hops.
"Reached the socket" is the kernel's receive stamp on both sides (Linux), so neither side's
busy event loop moves the split. The `server ttft` columns are the simulator's `ttft_ms` (the
same arrival -> the first token generated, before its write); "overhead vs ttft p99" is the
overhead measured against it, i.e. with the simulator's own write lag on the client's side.
Before the simulator stamped arrivals in the kernel (and reported `ttfb_ms`) its time started at
its first read of the request: time a request waited in its socket behind a busy simulator loop
was charged to the client. With `--transport httpcore` (httpx's default pool, which has no
arrival stamps) the overhead also holds the client's read and SSE parsing up to the first delta.

Modes (`--mode`):
  executor  the runner's `Executor` on a generated plan: N sessions (`concurrency = N`), each
            `--rounds` sequential short turns — exactly what `wl run` records;
  send      `workloadlang.run.client.send` alone, N at a time in lock-step rounds (a burst: N
            requests leave at the same instant every round, the worst case for both sides).

In executor mode a second row leaves out each session's first turn (all sessions start together:
their first requests reach the simulator at once).

Also reported: the client process's CPU time per request (user + system over the measured
requests only, `time.process_time`), which bounds the request rate one client process can drive.

`--profile` runs the 64-stream executor case under cProfile and prints the top functions by
own time (client process only).

Usage: /work/venv/bin/python bench/client_overhead.py [--streams 1,64] [--rounds 20]
       [--mode executor|send|both] [--max-tokens 32] [--decode-us 10000] [--profile]
       [--transport wire|httpcore] [--probe-sim] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from simproc import free_port, split_cpus, start_sim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from workloadlang import api  # noqa: E402
from workloadlang.plan.realise import RatioSizer, Realiser  # noqa: E402
from workloadlang.run.client import Endpoint, WireRequest, send  # noqa: E402
from workloadlang.run.executor import Executor, ListSink  # noqa: E402
from workloadlang.run.transport import make_client  # noqa: E402

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


def start_server(port: int, decode_us: float, probe: bool,
                 cpus: set[int] | None = None) -> subprocess.Popen:
    flags = (*SIM_FLAGS, "--decode-us-per-token", str(decode_us))
    script = os.path.join(ROOT, "bench", "simprobe.py") if probe else None
    return start_sim(port, *flags, script=script, cpus=cpus)


def pin_cpus() -> set[int]:
    """Pin this process (and the threads it starts from now on) to all CPUs but the last;
    output: the last one, for the simulator."""
    mine, sim = split_cpus()
    os.sched_setaffinity(0, mine)
    return sim


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


TRANSPORT = "wire"


def client() -> httpx.AsyncClient:
    """`wire`: the client `wl run` builds (`run.transport.make_client`: WireTransport for
    http://); `httpcore`: httpx's default client and connection pool, for comparison."""
    if TRANSPORT == "httpcore":
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=1024)
        return httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits)
    return make_client()


async def run_executor(base: str, streams: int, rounds: int, max_tokens: int) -> tuple[list, dict, float]:
    source = api.Source(name="overhead.wl", text=WORKLOAD)
    wl = api.parse_checked(source)
    plan = api.make_plan(wl, source, {"streams": str(streams), "rounds": str(rounds),
                                      "max_tokens": str(max_tokens)}, salt="bench",
                         env={"max_context": 65536})
    endpoint = Endpoint(base_url=base + "/v1", model="wl-sim")
    sink = ListSink()
    async with client() as c:
        # warm the pool: one connection per stream, as a long run has after its first round
        await asyncio.gather(*(send(c, endpoint, warm(i, max_tokens)) for i in range(streams)))
        SEND_PATH.clear()  # the warm-up opened connections (the send path awaited connects)
        GC_PAUSES.clear()
        OUTCOMES.clear()
        cpu0 = cpu_s()
        run = await Executor(plan, Realiser(plan, RatioSizer(1.0)), c, endpoint, sink).run()
        cpu = cpu_s() - cpu0
    later = {r.id for r in run.records if r.index}
    pairs = [pair(o) for o in OUTCOMES if o.error is None]
    global LATER
    LATER = [pair(o) for o in OUTCOMES if o.error is None and o.id in later]
    return pairs, run.client, cpu


def pair(o: Any) -> tuple[float | None, float | None, float | None]:
    """Output: (client TTFT s, server time to first byte ms, server TTFT ms) of an Outcome; the
    time to first byte is the TTFT when the server does not report `ttfb_ms`."""
    return o.ttft_s, (o.timings or {}).get("ttfb_ms", o.server_ttft_ms), o.server_ttft_ms


def warm(i: int, max_tokens: int) -> WireRequest:
    return WireRequest(id=f"warm/{i}", messages=[{"role": "user", "content": "warm up"}],
                       max_tokens=max_tokens)


async def run_send(base: str, streams: int, rounds: int, max_tokens: int) -> tuple[list, dict, float]:
    endpoint = Endpoint(base_url=base + "/v1", model="wl-sim")
    pairs = []
    async with client() as c:
        await asyncio.gather(*(send(c, endpoint, warm(i, max_tokens)) for i in range(streams)))
        cpu0 = cpu_s()
        for k in range(rounds):
            reqs = [WireRequest(id=f"r{k}/{i}", max_tokens=max_tokens,
                                messages=[{"role": "user", "content": f"Say something {k} {i}."}])
                    for i in range(streams)]
            outs = await asyncio.gather(*(send(c, endpoint, r) for r in reqs))
            pairs += [pair(o) for o in outs if o.error is None]
        cpu = cpu_s() - cpu0
    return pairs, {}, cpu


def cpu_s() -> float:
    return time.process_time()


LATER: list = []  # executor mode: the requests after each session's first (not the start burst)


OUTCOMES: list = []  # executor mode: every Outcome (for the split of the worst overheads)


def collect_outcomes() -> None:
    """Keep every `Outcome` the executor gets (bench only)."""
    from workloadlang.run import executor

    original = executor.send

    async def send_and_keep(*args, **kw):  # type: ignore[no-untyped-def]
        out = await original(*args, **kw)
        OUTCOMES.append(out)
        return out

    executor.send = send_and_keep  # type: ignore[assignment]


def split_worst(n: int = 12) -> str:
    """The `n` largest overheads split, on the shared wall clock, into the way to the simulator's
    first token ('there': send -> first token generated, minus the simulator's own TTFT) and the
    way back (first token generated -> its bytes' arrival at the client)."""
    rows = []
    for o in OUTCOMES:
        _, server_ms, _ = pair(o)
        if o.error is None and o.ttft_s is not None and server_ms is not None:
            split = there_back(o, server_ms)
            if split is not None:
                rows.append((o.ttft_s * 1000 - server_ms, *split))
    rows.sort(reverse=True)
    worst = rows[:n]
    if not worst:
        return "no split (the simulator did not report first_token_unix)"
    med = lambda i: statistics.median(r[i] for r in worst)  # noqa: E731
    return (f"worst {len(worst)} overheads: median {med(0):.2f} ms = there {med(1):.2f} + "
            f"back {med(2):.2f} ms")


def check_flags(over_ms: float = 1.0) -> str:
    """The first-token flag (`ttft_late_s`) against what it flags: of the requests whose
    overhead is over `over_ms`, how many are flagged with a bound that covers the overhead
    beyond `over_ms` (every one should be); and how many flagged ones were in fact within it
    (the bound is an upper bound, not the error)."""
    over, flagged, covered, loose, missed = 0, 0, 0, 0, []
    for o in OUTCOMES:
        _, server_ms, _ = pair(o)
        if o.error is not None or o.ttft_s is None or server_ms is None:
            continue
        extra = o.ttft_s * 1000 - server_ms
        late = None if o.ttft_late_s is None else o.ttft_late_s * 1000
        flagged += late is not None
        if extra > over_ms:
            over += 1
            if late is not None and extra - over_ms <= late:
                covered += 1
            else:
                missed.append(f"{extra:.1f} ms ({way(o, server_ms)}, bound {late})")
        elif late is not None:
            loose += 1
    return (f"overhead > {over_ms:g} ms: {over}, of them flagged with a bound that covers it: "
            f"{covered}; flagged: {flagged}, of them within {over_ms:g} ms: {loose}"
            + (f"; not covered: {', '.join(missed[:5])}" if missed else ""))


def there_back(o: Any, server_ms: float) -> tuple[float, float] | None:
    """Output: a request's overhead (ms) split on the shared wall clock into the way to the
    simulator's first token and the way back (see `split_worst`), None when the simulator did
    not report `first_token_unix`."""
    first = (o.timings or {}).get("first_token_unix")
    if not first:
        return None
    back = (o.t_send_unix + o.ttft_s - first) * 1000
    return o.ttft_s * 1000 - server_ms - back, back


def way(o: Any, server_ms: float) -> str:
    """Output: `there_back` as text."""
    split = there_back(o, server_ms)
    return "no split" if split is None else f"there {split[0]:.1f} + back {split[1]:.1f}"


SEND_PATH: list[float] = []  # s from httpx's send() call to the request's bytes handed to the kernel


GC_PAUSES: list[float] = []  # s of each full (generation 2) collection in this process


def watch_gc() -> None:
    """Record how long each full garbage collection of this (the client's) process takes."""
    import gc

    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            GC_PAUSES.append(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)


def instrument_send_path() -> None:
    """Time the client's share of the send path: from handing the request to the transport
    (`run.client`'s `dispatch`) until `send()` on the socket returned (wraps both; bench only).
    A request written at the start by the transport's `send_now` is not in it."""
    from workloadlang.run import client, transport

    original_send, original_dispatch = transport._Connection.send, client.dispatch
    entered: dict[int, float] = {}

    async def dispatch(http_client, request):  # type: ignore[no-untyped-def]
        entered[id(request)] = time.perf_counter()
        return await original_dispatch(http_client, request)

    async def conn_send(self, payload, timeout):  # type: ignore[no-untyped-def]
        await original_send(self, payload, timeout)
        t = time.perf_counter()
        if entered:
            SEND_PATH.append(t - entered.pop(max(entered, key=entered.get)))

    client.dispatch = dispatch  # type: ignore[assignment]
    transport._Connection.send = conn_send  # type: ignore[method-assign]


def summarise(label: str, pairs: list, health: dict, cpu: float = 0.0) -> dict[str, Any]:
    over = [t * 1000 - s for t, s, _ in pairs if t is not None and s is not None]
    over_ttft = [t * 1000 - s for t, _, s in pairs if t is not None and s is not None]
    client_ms = [t * 1000 for t, _, _ in pairs if t is not None]
    server_ms = [s for _, _, s in pairs if s is not None]
    row = {"case": label, "n": len(over),
           "overhead_p50": statistics.median(over), "overhead_p90": pct(over, 0.90),
           "overhead_p99": pct(over, 0.99), "overhead_max": max(over),
           "overhead_vs_ttft_p99": pct(over_ttft, 0.99),
           "client_ttft_p50": statistics.median(client_ms), "server_ttft_p50": statistics.median(server_ms),
           "server_ttft_p99": pct(server_ms, 0.99), "client_cpu_ms_per_request": cpu * 1000 / max(1, len(pairs)),
           **{f"health_{k}": v for k, v in health.items()}}
    return row


def show(row: dict[str, Any]) -> None:
    print(f"{row['case']:<22} n={row['n']:<5} overhead p50 {row['overhead_p50']:6.3f} ms  "
          f"p90 {row['overhead_p90']:6.3f}  p99 {row['overhead_p99']:6.3f}  max {row['overhead_max']:7.3f}"
          f"  | overhead vs ttft p99 {row['overhead_vs_ttft_p99']:6.3f}"
          f"  | client ttft p50 {row['client_ttft_p50']:6.3f}  server ttft p50 "
          f"{row['server_ttft_p50']:6.3f} p99 {row['server_ttft_p99']:6.3f}"
          f"  | client CPU {row['client_cpu_ms_per_request']:.3f} ms/request")
    health = {k[7:]: v for k, v in row.items() if k.startswith("health_")}
    if health:
        print(f"{'':<22} client health: {health}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,64", help="comma-separated stream counts")
    ap.add_argument("--rounds", type=int, default=20, help="requests per stream")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--decode-us", type=float, default=10000,
                    help="the simulator's decode cost per token (prefill is always 0)")
    ap.add_argument("--mode", choices=["executor", "send", "both"], default="both")
    ap.add_argument("--profile", action="store_true", help="cProfile the 64-stream executor case")
    ap.add_argument("--base-url", help="use a running simulator root URL instead of starting one")
    ap.add_argument("--pin", action="store_true",
                    help="run the simulator on the last CPU and this client on the others")
    ap.add_argument("--probe-sim", action="store_true",
                    help="run the simulator with event-loop-lag and GC probes (bench/simprobe.py), and "
                         "time the client's own full collections; "
                         "they print when it stops")
    ap.add_argument("--transport", choices=["wire", "httpcore"], default="wire",
                    help="wire: what wl run uses; httpcore: httpx's default pool, for comparison")
    ap.add_argument("--reader-nice", type=int, default=None,
                    help="the socket reader thread's nice value (default: the transport's, 19)")
    args = ap.parse_args()
    if args.reader_nice is not None:
        from workloadlang.run import transport

        transport.READER_NICE = args.reader_nice
    global TRANSPORT
    TRANSPORT = args.transport
    if TRANSPORT == "wire":
        instrument_send_path()
    collect_outcomes()
    if args.probe_sim:
        watch_gc()
    proc = None
    if args.base_url:
        base = args.base_url.rstrip("/")
    else:
        port = free_port()
        proc = start_server(port, args.decode_us, args.probe_sim,
                            pin_cpus() if args.pin else None)
        base = f"http://127.0.0.1:{port}"
    try:
        modes = ["executor", "send"] if args.mode == "both" else [args.mode]
        for streams in (int(s) for s in args.streams.split(",")):
            for mode in modes:
                fn = run_executor if mode == "executor" else run_send
                pairs, health, cpu = asyncio.run(fn(base, streams, args.rounds, args.max_tokens))
                show(summarise(f"{mode} x{streams}", pairs, health, cpu))
                if mode == "executor" and streams > 1:
                    show(summarise(f"  after 1st turn x{streams}", LATER, {}))
                    print(f"{'':<22} {split_worst()}")
                    print(f"{'':<22} first-token flags: {check_flags()}")
                if args.probe_sim:
                    print(f"{'':<22} client full GC pauses during the run: {len(GC_PAUSES)}, max "
                          f"{max(GC_PAUSES, default=0) * 1000:.1f} ms (incl. the one before the clock)")
                    GC_PAUSES.clear()
                if SEND_PATH:
                    ms = [x * 1000 for x in SEND_PATH]
                    print(f"{'':<22} client send path (to the transport -> bytes to the kernel): p50 "
                          f"{statistics.median(ms):.3f} p99 {pct(ms, 0.99):.3f} max {max(ms):.3f} ms")
                    SEND_PATH.clear()
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            pairs, health, _ = asyncio.run(run_executor(base, 64, args.rounds, args.max_tokens))
            prof.disable()
            show(summarise("profiled executor x64", pairs, health))
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue())
    finally:
        if proc is not None:
            if args.probe_sim:
                proc.send_signal(signal.SIGINT)  # the probes report when uvicorn stops on it
            else:
                proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
