"""How soon a trace replay sends its first request, and what realising a record's text costs.

Two measurements, each for this checkout and, with `--against DIR`, another one (its own code
first on `sys.path`), side by side:

* per record (`--records N`, default 60 and 300): the first N records of the trace planned, then
  against the simulator (its own process): the run's calibration (which sizes text for the
  engine), then every request's fillers sized (`RequestMaker.size_all`, what a run does before
  its clock) and its text realised and encoded as sent (`RequestMaker.chat`). Reported: the
  seconds of each step, what sizing and realising cost per record, and the tokenizer calls
  made (calibration's and sizing's).
* first send (`--first-send`): `wl run mooncake --trace TRACE --sim --time-scale 0
  --time-budget B` in a fresh process: seconds from the process's start to the first request
  sent (its record's `t_send_unix`), the process's peak RSS (`VmHWM`, read every 0.1 s; the
  simulator is a process of its own), and the requests answered within the budget. A checkout
  that sends nothing within `--first-send-limit` seconds is stopped and reported as such.

Usage: python -m bench.trace_start [--trace PATH] [--records 60,300] [--first-send]
       [--budget 40] [--against DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    ROOT,
    add_json_argument,
    describe_machine,
    machine,
    simulator,
    table,
    write_json,
)

TRACE = ROOT.parent / "shared" / "data" / "traces" / "mooncake" / "conversation_trace.jsonl"


# ---------------------------------------------------------------- per record (in a child)


async def per_record(base_url: str, trace: str, n: int) -> dict[str, Any]:
    """Output: the seconds each step took for the first `n` records (see the module) and the
    tokenizer calls, with whichever workloadlang is first on `sys.path`."""
    from workloadlang import api
    from workloadlang.plan.realise import Realiser
    from workloadlang.results import ListSink
    from workloadlang.run import runner
    from workloadlang.run.maker import RequestMaker

    source = api.load("mooncake")
    plan = api.make_plan(api.parse_checked(source), source,
                         {"trace": trace, "limit": str(n), "time_scale": "0"}, salt="bench")
    async with api.open_engine(base_url) as link:
        calls = [0]
        if link.tokenizer is not None:
            count = link.tokenizer.count

            async def counted(text: str) -> int:
                calls[0] += 1
                return await count(text)

            link.tokenizer.count = counted
        sink = ListSink()
        t0 = time.perf_counter()
        _, sizer, _ = await runner.calibration(plan, link, sink)
        t1 = time.perf_counter()
        cal_calls = calls[0]
        maker = RequestMaker(Realiser(plan, sizer), link.endpoint, time.perf_counter,
                             timeout_s=plan.timeout_s)
        await maker.size_all(([r] for r in plan.requests), sink)
        t2 = time.perf_counter()
        size = sum(len(b) if isinstance(b, bytes) else 0
                   for r in plan.requests for b in maker.chat(r, {}).messages)
        t3 = time.perf_counter()
    return {"records": n, "calibration_s": t1 - t0, "sizing_s": t2 - t1, "realise_s": t3 - t2,
            "per_record_ms": (t3 - t1) * 1000 / n, "tokenizer_calls": calls[0],
            "calibration_calls": cal_calls, "bytes": size}


def child(base_url: str, trace: str, n: int, out: str) -> None:
    """Run `per_record` and write its figures to `out` (JSON)."""
    got = asyncio.run(per_record(base_url, trace, n))
    Path(out).write_text(json.dumps(got))


def per_record_in(checkout: Path, base_url: str, trace: str, n: int) -> dict[str, Any]:
    """Output: `per_record` run by `checkout`'s code in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "got.json")
        code = (f"import sys, runpy; sys.path.insert(0, {str(checkout)!r}); "
                f"runpy.run_path({__file__!r}, run_name='bench_child')['child']"
                f"({base_url!r}, {trace!r}, {n}, {out!r})")
        subprocess.run([sys.executable, "-c", code], cwd=checkout, check=True)
        return json.loads(Path(out).read_text())


# ---------------------------------------------------------------- first send


def vm_hwm_mb(pid: int) -> float | None:
    """Output: the process's peak RSS so far (MB), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def first_send(checkout: Path, trace: str, budget: float, limit: float) -> dict[str, Any]:
    """Output: seconds to the first request sent by `wl run mooncake --trace TRACE --sim` from
    `checkout`, its peak RSS and the requests sent (see the module)."""
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.jsonl"
        cmd = [sys.executable, "-m", "workloadlang.cli", "run", "mooncake", "--trace", trace,
               "--sim", "--time-scale", "0", "--time-budget", str(budget), "--no-viz",
               "--records", str(records), "--output", str(Path(tmp) / "results.json")]
        start = time.time()
        proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        peak, stopped = 0.0, False
        while proc.poll() is None:
            peak = max(peak, vm_hwm_mb(proc.pid) or 0.0)
            if not stopped and time.time() - start > limit and not sent(records):
                proc.send_signal(signal.SIGINT)  # nothing sent yet: stop it, keep what it wrote
                stopped = True
            time.sleep(0.1)
        times = sent(records)
        answered = sent(records, answered=True)
    return {"first_send_s": min(times) - start if times else None, "peak_rss_mb": peak,
            "answered": len(answered), "stopped": stopped, "exit": proc.returncode}


def sent(records: Path, answered: bool = False) -> list[float]:
    """Output: the send times (unix) of the requests sent (`answered`: of those answered
    without an error), from a records file."""
    if not records.exists():
        return []
    out = []
    for line in records.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line being written
        if rec.get("type") == "request" and rec.get("t_send_unix") and (
                not answered or rec.get("error") is None):
            out.append(rec["t_send_unix"])
    return out


# ---------------------------------------------------------------- the bench


PER_COLUMNS = [("checkout", "checkout", ""), ("records", "records", "d"),
               ("calibration_s", "calibration s", ".2f"), ("sizing_s", "sizing s", ".3f"),
               ("realise_s", "realise+encode s", ".3f"), ("per_record_ms", "ms a record", ".2f"),
               ("tokenizer_calls", "tokenizer calls", "d")]
FIRST_COLUMNS = [("checkout", "checkout", ""), ("first_send_s", "first send s", ".1f"),
                 ("peak_rss_mb", "peak RSS MB", ".0f"), ("answered", "answered", "d"),
                 ("stopped", "stopped unsent", "")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--records", default="60,300", help="comma-separated record counts")
    ap.add_argument("--first-send", action="store_true")
    ap.add_argument("--budget", type=float, default=40.0,
                    help="--time-budget of the first-send run (seconds)")
    ap.add_argument("--first-send-limit", type=float, default=150.0,
                    help="stop a first-send run that sent nothing after this many seconds")
    ap.add_argument("--against", metavar="DIR", help="another checkout, side by side")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    if not Path(args.trace).is_file():
        ap.error(f"no trace file at {args.trace} (--trace PATH)")
    started = machine()
    print(describe_machine(started))
    sides = {"this": ROOT}
    if args.against:
        sides = {"other": Path(args.against).resolve(), **sides}
    per, first = [], []
    if args.records:
        with simulator() as sim:
            for n in (int(x) for x in args.records.split(",")):
                for side, checkout in sides.items():
                    got = per_record_in(checkout, sim.base_url, args.trace, n)
                    per.append({"checkout": f"{side} ({checkout.name})", **got})
        print(table(per, PER_COLUMNS))
    if args.first_send:
        for side, checkout in sides.items():
            got = first_send(checkout, args.trace, args.budget, args.first_send_limit)
            first.append({"checkout": f"{side} ({checkout.name})", **got})
        print(table(first, FIRST_COLUMNS))
    write_json(args.json, "trace_start", args, per, started, first_send=first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
