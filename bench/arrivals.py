"""Open-loop arrivals: how well `wl run` holds a schedule of arrivals against the simulator.

A workload of `--rate` arrivals a second for `--seconds` (`session tenant repeat N arrive every
exponential(1s / RATE)`, or a constant gap with `--process constant`), each a short request
(`--prompt-tokens` tokens of filler, `--max-tokens` tokens of answer), is run by the real `wl
run` CLI (a subprocess) against the simulator in another process (prefill 10 us and decode 100
us a token, 256 slots: it keeps up, so only the client can be late).

Reported per run, from the run's own records: the schedule lag (each arrival's send minus its
planned time) p50 / p99 / max and how many were late by more than 10 ms, with the client's
event-loop lag p99 as the run measured it, the achieved arrival rate and the errors.

`--pin` runs the simulator on the last CPU and `wl run` on the others. `--runs N` runs N times.

Usage: python -m bench.arrivals [--rate 50] [--seconds 20] [--process poisson|constant]
       [--prompt-tokens 64] [--max-tokens 8] [--pin] [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

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
from bench.scale import wl_command

SIM_FLAGS = ("--prefill-us-per-token", "10", "--decode-us-per-token", "100", "--slots", "256",
             "--device-tokens", "4000000")
COLUMNS = [("run", "run", "d"), ("arrivals", "arrivals", "d"), ("rate", "rate/s", ".1f"),
           ("lag_p50_ms", "lag p50 ms", ".2f"), ("lag_p99_ms", "lag p99 ms", ".2f"),
           ("lag_max_ms", "lag max ms", ".2f"), ("late", "late >10ms", "d"),
           ("loop_lag_p99_ms", "loop lag p99 ms", ".2f"), ("errors", "errors", "d")]


def workload(rate: float, n: int, process: str, prompt: int, max_tokens: int) -> str:
    """Output: the `.wl` text of the bench's arrivals."""
    gap = "exponential(1s / $rate)" if process == "poisson" else "1s / $rate"
    return (f"workload arrivals {{\n  params {{ rate: float = {rate} }}\n"
            f"  session tenant repeat {n} arrive every {gap} {{\n"
            f"    user filler {prompt}\n    reply {max_tokens} label one_shot\n  }}\n}}\n")


def run_once(args: argparse.Namespace, out_dir: str, cpus: tuple[set[int], set[int]] | None,
             n: int) -> dict[str, Any]:
    """One `wl run` of the arrivals. Output: its figures."""
    path = os.path.join(out_dir, "arrivals.wl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(workload(args.rate, n, args.process, args.prompt_tokens, args.max_tokens))
    out, recs = os.path.join(out_dir, "results.json"), os.path.join(out_dir, "records.jsonl")
    client_cpus, sim_cpus = cpus if cpus else (None, None)
    with simulator(*SIM_FLAGS, cpus=sim_cpus) as sim:
        pin = (lambda: os.sched_setaffinity(0, client_cpus)) if client_cpus else None
        proc = subprocess.run([*wl_command(), "run", path, "--base-url", sim.base_url,
                               "--no-viz", "--salt", f"bench{args.seed}", "--output", out,
                               "--records", recs], capture_output=True, text=True,
                              preexec_fn=pin)
    if not os.path.exists(out):
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    with open(out, encoding="utf-8") as f:
        res = json.load(f)
    lags = [r["schedule_lag_s"] * 1000 for r in res["records"]
            if r.get("schedule_lag_s") is not None]
    sent = sorted(r["t_start_s"] for r in res["records"] if r["t_start_s"] is not None)
    span = sent[-1] - sent[0] if len(sent) > 1 else 0.0
    return {"exit_code": proc.returncode, "arrivals": len(lags),
            "rate": (len(sent) - 1) / span if span else None,
            "lag_p50_ms": pct(lags, 0.5), "lag_p99_ms": pct(lags, 0.99),
            "lag_max_ms": max(lags, default=None), "late": sum(1 for v in lags if v > 10),
            "loop_lag_p99_ms": res["client"].get("loop_lag_p99_ms"),
            "errors": sum(1 for r in res["records"] if r["error"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=50.0, help="arrivals per second")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long arrivals come")
    ap.add_argument("--process", choices=("poisson", "constant"), default="poisson")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1, help="the salt's number (the arrival times)")
    ap.add_argument("--pin", action="store_true",
                    help="run the simulator on the last CPU and wl run on the others")
    ap.add_argument("--runs", type=int, default=1, help="runs in a row")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    cpus = split_cpus() if args.pin else None
    n = max(1, round(args.rate * args.seconds))
    rows = []
    for k in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="wl-arrivals-") as out_dir:
            rows.append({"run": k, **run_once(args, out_dir, cpus, n)})
        if "error" in rows[-1]:
            print(f"run {k}: {rows[-1]['error']}")
    done = [r for r in rows if "error" not in r]
    if done:
        print(table(done, COLUMNS))
    write_json(args.json, "arrivals", args, rows, started)
    return 0 if len(done) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
