"""Scale-out: one `wl run` process's ceiling against the simulator, and the same load on 1 and 2
Ray workers.

The load: `--sessions` sessions at once (the concurrency limit), each a context of `--context`
tokens sent as a prefill-only request (`probe`, a 1-token answer), then `--turns` more, each
`--step` tokens longer: every request's body is about the context. Two cases (`--cases`):
`small` (1k-token contexts: requests per second) and `large` (100k-token contexts: request-body
bytes per second). The simulator runs in its own process (`bench.harness.simulator`) with no
prefill or decode cost, so what it does per request is only reading, parsing and hashing it.

Reported per run (`mode`: `1 process`, or `N workers` on a local Ray instance):
- requests/s and request-body MB/s, from the first send to the last answer's end (the records'
  times, on the driver's clock): the prompt text sent, prompt tokens times the calibrated
  characters per token (the JSON around the text adds ~100 bytes a message);
- client CPU per request: the run's own `client.cpu_s` (the process's CPU time, all threads,
  Ray's own in a worker, from the run's start to its end; summed over the workers) over the
  requests; for workers also the driver's CPU, as a share of one CPU between the first and the
  last record to arrive (receiving, merging and writing the records, and Ray's own threads);
- simulator CPU per request (its process's CPU time between the first and the last record to
  arrive): when that times the requests/s is near 1 (a CPU), the simulator set the pace;
- the client's own verdict on itself (`client_bottleneck`, per worker);
- for one process, its largest resident memory so far (`rss_mb`, the bench's own process, which
  holds Ray's driver too unless `--workers ''`: run one case with `--workers ''` at two
  `--sessions` counts to see what a session of that context costs).

`ceiling req/s` is what one CPU of client would sustain at that CPU per request (1 s / CPU per
request); `ceiling MB/s` the same in body bytes. On a machine with fewer CPUs than workers +
simulator + driver, more workers only share the same CPUs: the figure says so (`cpus`).

Usage: python -m bench.scale_out [--cases small,large] [--workers 1,2] [--sessions 64]
       [--turns 20] [--small-context 1k] [--large-context 100k] [--step 100] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import add_json_argument, describe_machine, machine, simulator, table, write_json
from workloadlang import api
from workloadlang.resultsmodels import ClientHealth

WORKLOAD = """
workload scale_out {
  doc "Client throughput: sessions of long contexts, each request a prefill"
  params {
    sessions: int = 64 in 1..
    turns: int = 20 in 0..
    context: tokens = 1k in 1..
    step: tokens = 100 in 1..
  }
  concurrency = $sessions
  session s repeat $sessions {
    user filler $context
    probe label context
    repeat $turns label turn { user filler $step; probe }
  }
}
"""

SIM = ("--prefill-us-per-token", "0", "--decode-us-per-token", "0", "--slots", "1024",
       "--max-model-len", "1000000", "--device-tokens", "100000000")


class Watch:
    """A sink that keeps the records and notes the wall clock, this process's CPU time and the
    simulator's (`sim_cpu`) at the first and the last record to arrive."""

    def __init__(self, sim_cpu) -> None:
        self.sim_cpu = sim_cpu
        self.records: list[Any] = []
        self.first: tuple[float, float, float] | None = None
        self.last: tuple[float, float, float] | None = None

    def record(self, rec: Any) -> None:
        now = (time.perf_counter(), time.process_time(), self.sim_cpu())
        self.first = self.first or now
        self.last = now
        self.records.append(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        pass


async def one_run(sim: Any, params: dict[str, str], workers: int | None,
                  tmp: Path) -> tuple[Any, Watch]:
    """One run of the load: in this process, or on `workers` Ray workers."""
    path = tmp / "scale_out.wl"
    path.write_text(WORKLOAD, encoding="utf-8")
    source = api.load(str(path))
    async with api.open_engine(sim.base_url, sim=True) as engine:
        plan = api.make_plan(api.parse_checked(source), source, params, salt="bench",
                             env={"max_context": engine.info.max_context})
        watch = Watch(sim.cpu_seconds)
        if workers is None:
            return await api.run_workload(plan, engine, watch), watch
        from workloadlang.scale import ray_run

        return await ray_run.run(plan, engine, watch, workers=workers), watch


def figures(case: str, mode: str, results: Any, watch: Watch) -> dict[str, Any]:
    """Output: one row of the table (see the module)."""
    recs = [r for r in results.records if r.error is None and r.skipped is None]
    n = max(1, len(recs))
    cpt = results.calibration.chars_per_token or 0.0
    span = max(r.t_start_s + r.e2e_s for r in recs) - min(r.t_start_s for r in recs)
    body = sum(r.prompt_tokens or 0 for r in recs) * cpt / n
    rps = len(recs) / span if span > 0 else None
    cpu = (results.client.cpu_s or 0.0) / n  # the workers' summed, or this process's
    arrived = max(1, len(watch.records) - 1)
    window = watch.last[0] - watch.first[0]
    driver = (watch.last[1] - watch.first[1]) / window \
        if results.client.workers and window > 0 else None
    return {"case": case, "mode": mode, "requests": len(recs), "body_kb": body / 1000,
            "rps": rps, "mbps": rps * body / 1e6 if rps else None,
            "client_cpu_ms": cpu * 1000, "driver_cpu_pct": driver * 100 if driver else None,
            "sim_cpu_ms": (watch.last[2] - watch.first[2]) * 1000 / arrived,
            "ceiling_rps": 1 / cpu if cpu else None,
            "ceiling_mbps": body / cpu / 1e6 if cpu else None,
            "bottleneck": bottleneck(results.client), "exit": int(results.exit_code),
            "rss_mb": None if results.client.workers else max_rss_mb()}


def max_rss_mb() -> float:
    """Output: this process's largest resident set so far, in MB (Linux counts it in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bottleneck(client: ClientHealth) -> str:
    """Output: `no`, `yes` (one process), or which workers were one (`worker 0,1`)."""
    workers = client.bottleneck_workers
    if workers:
        return "worker " + ",".join(map(str, workers))
    return "yes" if client.client_bottleneck else "no"


def run_case(case: str, context: str, modes: list[int | None], args: argparse.Namespace,
             tmp: Path) -> list[dict[str, Any]]:
    params = {"sessions": str(args.sessions), "turns": str(args.turns), "context": context,
              "step": str(args.step)}
    rows = []
    for workers in modes:
        with simulator(*SIM) as sim:
            results, watch = asyncio.run(one_run(sim, params, workers, tmp))
            rows.append(figures(case, "1 process" if workers is None else f"{workers} workers",
                                results, watch))
    return rows


COLUMNS = [("case", "case", ""), ("mode", "mode", ""), ("requests", "requests", "d"),
           ("body_kb", "body KB", ".1f"), ("rps", "req/s", ".0f"), ("mbps", "MB/s", ".1f"),
           ("client_cpu_ms", "client CPU ms/req", ".3f"),
           ("driver_cpu_pct", "driver CPU %", ".0f"), ("sim_cpu_ms", "sim CPU ms/req", ".3f"),
           ("ceiling_rps", "ceiling req/s", ".0f"), ("ceiling_mbps", "ceiling MB/s", ".0f"),
           ("bottleneck", "client bottleneck", ""), ("rss_mb", "max RSS MB", ".0f")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--cases", default="small,large")
    ap.add_argument("--workers", default="1,2", help="worker counts to run besides one process")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--small-context", default="1k")
    ap.add_argument("--large-context", default="100k")
    ap.add_argument("--step", default="100")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if counts:  # one local Ray instance for every sharded run
        import ray

        ray.init(num_cpus=max(counts + [os.cpu_count() or 1]), include_dashboard=False,
                 log_to_driver=False, logging_level="error")
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for case in args.cases.split(","):
                context = args.small_context if case == "small" else args.large_context
                rows += run_case(case, context, [None, *counts], args, Path(tmp))
    finally:
        if counts:
            ray.shutdown()
    print(f"machine: {describe_machine(started)}")
    print(table(rows, COLUMNS))
    write_json(args.json, "scale_out", args, rows, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
