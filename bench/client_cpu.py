"""The CPU a whole `wl run` process uses for one run of 768 requests in 64 sessions, this
checkout side by side with another (`--against DIR`, e.g. a worktree of the previous release).

The workload: 64 sessions of 12 turns, each turn a new filler of `--turn-tokens` tokens and a
16-token reply, against the simulator in its own process (started here, its CPU not counted).
Each checkout runs `python -m workloadlang.cli run FILE --base-url SIM` from its own folder (its
own code first on `sys.path`) in a fresh process; the two alternate (A B, B A, ...) for
`--repeat` turns. Measured from the process's own rusage (`os.wait4`): user + system CPU, wall
time and peak RSS; from its results, the requests answered and the tokenizer calls its
calibration reports (a checkout that does not report them: "-"). Everything the process does
counts: start-up, discovery, calibration and sizing, the run, the results.

Usage: python -m bench.client_cpu [--against DIR] [--repeat 3] [--sessions 64] [--turns 12]
       [--turn-tokens 200] [--pin] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    split_cpus,
    table,
    write_json,
)

WORKLOAD = """
workload client_cpu {
  params { sessions: int = 64; turns: int = 12; turn_tokens: tokens = 200 }
  concurrency = $sessions
  session user repeat $sessions {
    repeat $turns label turn { user filler $turn_tokens; reply 16 }
  }
}
"""

SIM_FLAGS = ("--prefill-us-per-token", "1", "--decode-us-per-token", "200",
             "--device-tokens", "8000000", "--slots", "64")


def run_once(checkout: Path, wl: Path, base: str, args: argparse.Namespace,
             folder: Path, cpus: set[int] | None) -> dict[str, Any]:
    """One `wl run` of the workload by `checkout` against the simulator at `base`. Output:
    its CPU seconds, wall seconds, peak RSS (MB), exit code, requests answered and the
    tokenizer calls its calibration reports."""
    out = folder / "results.json"
    cmd = [sys.executable, "-m", "workloadlang.cli", "run", str(wl), "--base-url", base,
           "--no-viz", "--salt", "client-cpu", "--output", str(out),
           "--sessions", str(args.sessions), "--turns", str(args.turns),
           "--turn-tokens", str(args.turn_tokens)]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=pin)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    results = json.loads(out.read_text()) if out.exists() else {}
    answered = sum(1 for r in results.get("records", []) if r.get("error") is None
                   and not r.get("skipped"))
    calls = results.get("calibration", {}).get("tokenizer_calls")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall,
            "rss_mb": usage.ru_maxrss / 1024, "exit": os.waitstatus_to_exitcode(status),
            "answered": answered, "tokenizer_calls": calls}


def side_by_side(base: str, args: argparse.Namespace, cpus: set[int] | None) -> list[dict]:
    """Output: one row per checkout: the median of each figure over `--repeat` runs, and the
    range of its CPU."""
    sides = {"other": Path(args.against).resolve(), "this": ROOT} if args.against \
        else {"this": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / "client_cpu.wl"
        wl.write_text(WORKLOAD)
        for turn in range(args.repeat):
            order = list(sides) if turn % 2 == 0 else list(reversed(sides))
            for side in order:
                got = run_once(sides[side], wl, base, args, Path(tmp), cpus)
                runs[side].append(got)
                print(f"turn {turn + 1}/{args.repeat}: {side}: cpu {got['cpu_s']:.2f} s, "
                      f"exit {got['exit']}, {got['answered']} answered", file=sys.stderr)
    rows = []
    for side, got in runs.items():
        cpu = [g["cpu_s"] for g in got]
        calls = [g["tokenizer_calls"] for g in got if g["tokenizer_calls"] is not None]
        rows.append({"checkout": f"{side} ({sides[side].name})",
                     "cpu_s": statistics.median(cpu), "cpu_min_s": min(cpu),
                     "cpu_max_s": max(cpu),
                     "wall_s": statistics.median(g["wall_s"] for g in got),
                     "rss_mb": statistics.median(g["rss_mb"] for g in got),
                     "answered": min(g["answered"] for g in got),
                     "tokenizer_calls": max(calls) if calls else None,
                     "runs": got})
    return rows


COLUMNS = [("checkout", "checkout", ""), ("cpu_s", "CPU s (median)", ".2f"),
           ("cpu_min_s", "min", ".2f"), ("cpu_max_s", "max", ".2f"),
           ("wall_s", "wall s", ".2f"), ("rss_mb", "peak RSS MB", ".0f"),
           ("answered", "answered", "d"), ("tokenizer_calls", "tokenizer calls", "d")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", metavar="DIR", help="another checkout, side by side")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each checkout")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--turn-tokens", type=int, default=200)
    ap.add_argument("--pin", action="store_true",
                    help="the simulator on the last CPU, the runs on the others")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    mine, sim_cpus = split_cpus() if args.pin else (None, None)
    with simulator(*SIM_FLAGS, cpus=sim_cpus) as sim:
        rows = side_by_side(sim.base_url, args, mine)
    print(f"{args.sessions} sessions x {args.turns} turns = {args.sessions * args.turns} "
          "requests a run")
    print(table(rows, COLUMNS))
    write_json(args.json, "client_cpu", args, rows, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
