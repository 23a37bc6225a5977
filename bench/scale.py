"""Scale: the bundled agent-sim workload at 256 sessions, run by the real `wl run` CLI (a
subprocess) against the simulator in another process.

Each session: 20 main steps of 500 tokens, 2 sub-agents of 1k, a 500-token finalize and 16-token
replies, with agent-sim's warm-up, re-read and baselines sent with the others (`--no-isolation`:
this measures the client under load, not verdicts). The simulator uses the agent-sim
preset's time model with an 8M-token device cache (no evictions) and 64 slots; `--decode-us`
sets its decode cost per token (the preset's 200 us makes the client the only limit; 25,000 us,
40 tokens/s a stream, makes the engine the limit, as a large model under load is).

Reported per run: requests/s, errors, the `wl run` process's CPU per request and peak RSS (its
own high-water mark, `os.wait4`), and the client's health as the run itself measured and wrote
it (`results.client`): event-loop lag p99 / max (how late a 5 ms sleep wakes) and client delay
p99 / max / count over 10 ms (for every request, from the moment its session could go on -- the
run's start, a phase barrier opening, the previous answer's last byte -- to its send, minus the
planned wait and the wait for a concurrency slot). From the records: the session gap (an answer's
end to its session's next send), the start (the sessions' first sends, first to last), the
largest cohort of answers ending less than 2 ms apart (an engine ending a batch; one event loop
turns them around one after another). And the machine's share: the client's involuntary
context switches and the VM's steal time over the run.

`--pin` runs the simulator on the last CPU and `wl run` on the others, as a client next to a GPU
engine that does not take its CPUs. `--runs N` runs N times in a row and prints the spread.

Usage: python -m bench.scale [--sessions 256] [--steps 20] [--step-tokens 500] [--slots 64]
       [--decode-us US] [--pin] [--runs N] [--keep DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


def wl_command() -> list[str]:
    """Output: the command that runs `wl` from this interpreter's environment."""
    script = os.path.join(os.path.dirname(sys.executable), "wl")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "workloadlang.cli"]


def turns(recs: list[dict]) -> list[tuple[float, float]]:
    """Output: for every answer after which its session sent again, (its end in seconds from
    the run's start, the gap from that end to the session's next send in ms)."""
    out, last = [], {}
    for r in sorted((r for r in recs if r["t_start_s"] is not None), key=lambda r: r["t_start_s"]):
        prev = last.get(r["session"])
        if prev is not None and prev["e2e_s"] is not None:
            end = prev["t_start_s"] + prev["e2e_s"]
            out.append((end, (r["t_start_s"] - end) * 1000))
        last[r["session"]] = r
    return out


def end_cohorts(recs: list[dict], window_ms: float = 2.0) -> list[list[tuple[float, float]]]:
    """Input: the run's records. Output: `turns` grouped in cohorts, in time order: ends (the
    answer's last byte) less than `window_ms` after the one before, as an engine ending a
    batch writes them."""
    cohorts: list[list[tuple[float, float]]] = []
    for end, gap in sorted(turns(recs)):
        if cohorts and (end - cohorts[-1][-1][0]) * 1000 < window_ms:
            cohorts[-1].append((end, gap))
        else:
            cohorts.append([(end, gap)])
    return cohorts


def describe_cohorts(cohorts: list[list[tuple[float, float]]]) -> str:
    """Output: the largest cohort of answers ending together, and for the worst session gap how
    many answers that ended before it still waited for their session's next send when it ended
    (the client turns them around one after the other)."""
    ends = [pair for c in cohorts for pair in c]
    if not ends:
        return "no session sent after an answer"
    big = max(cohorts, key=len)
    end, gap = max(ends, key=lambda p: p[1])
    waiting = sum(1 for e, g in ends if e < end and e + g / 1000 > end)
    return (f"largest cohort {len(big)} answers (ends < 2 ms apart) at {big[0][0]:.3f} s; "
            f"the worst gap ({gap:.1f} ms) followed an end at {end:.3f} s, when {waiting} "
            f"answers that ended before it still waited for their next send")


def start_span_ms(recs: list[dict]) -> float | None:
    """Output: milliseconds from the first to the last of the sessions' first sends (all start
    together: the client writes them one after another), None without any send."""
    first: dict[str, float] = {}
    for r in recs:
        t = r["t_start_s"]
        if t is not None and (r["session"] not in first or t < first[r["session"]]):
            first[r["session"]] = t
    return (max(first.values()) - min(first.values())) * 1000 if first else None


def steal_s() -> float | None:
    """Output: the CPU time the VM's host has taken from this machine's CPUs so far (the `steal`
    column of /proc/stat, in seconds), or None where there is no such counter."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def wl_args(args: argparse.Namespace, base_url: str, out_dir: str) -> list[str]:
    return ["run", "agent-sim", "--base-url", base_url, "--no-viz",
            "--output", os.path.join(out_dir, "results.json"),
            "--records", os.path.join(out_dir, "records.jsonl"),
            "--sessions", str(args.sessions), "--main-tokens", str(args.steps * args.step_tokens),
            "--step-tokens", str(args.step_tokens), "--sub-tokens", "1k", "--sub-windows", "2",
            "--finalize-tokens", "500", "--max-tokens", "16",
            # a load test: the requests agent-sim times alone go out with the others
            "--no-isolation"]


def run_once(args: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    """Start the simulator, run `wl run` against it (results in `out_dir`), stop the simulator.
    Output: the run's row (`row_of`), or {"error": ...} when `wl run` wrote no results."""
    wl_cpus, sim_cpus = split_cpus() if args.pin else (None, None)
    flags = ["--preset", "agent-sim", "--device-tokens", "8000000", "--slots", str(args.slots)]
    if args.decode_us is not None:
        flags += ["--decode-us-per-token", str(args.decode_us)]
    with simulator(*flags, cpus=sim_cpus) as sim:
        cmd = [*wl_command(), *wl_args(args, sim.base_url, out_dir)]
        pin = (lambda: os.sched_setaffinity(0, wl_cpus)) if wl_cpus else None
        t0, steal0 = time.perf_counter(), steal_s()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, preexec_fn=pin)
        _, status, usage = os.wait4(proc.pid, 0)
        wall, steal1 = time.perf_counter() - t0, steal_s()
        stderr = proc.stderr.read() if proc.stderr else ""
    path = os.path.join(out_dir, "results.json")
    code = os.waitstatus_to_exitcode(status)
    if not os.path.exists(path):
        return {"error": f"wl run exited {code} without results: {stderr.strip()[-2000:]}"}
    with open(path) as f:
        res = json.load(f)
    steal = None if steal0 is None or steal1 is None else steal1 - steal0
    return row_of(res, code, wall, usage, steal)


def row_of(res: dict, code: int, wall: float, usage: Any, steal: float | None) -> dict[str, Any]:
    """Input: a results document, the exit code, wall seconds, the `wl run` rusage, steal
    seconds. Output: the run's row of figures."""
    recs = res["records"]
    sent = [r for r in recs if not r["skipped"]]
    cpu = usage.ru_utime + usage.ru_stime
    gaps = [gap for _, gap in turns(recs)]
    health = res["client"]
    return {"exit_code": code, "incomplete": res["incomplete"], "requests": len(sent),
            "planned": len(recs), "errors": sum(1 for r in sent if r["error"]),
            "requests_per_s": len(sent) / wall, "client_cpu_ms_per_request": cpu * 1000 / max(1, len(sent)),
            "peak_rss_mb": usage.ru_maxrss / 1024, "involuntary_switches": usage.ru_nivcsw,
            "steal_s": steal, "loop_lag_p99_ms": health.get("loop_lag_p99_ms"),
            "loop_lag_max_ms": health.get("loop_lag_max_ms"),
            "client_delay_p99_ms": health.get("client_delay_p99_ms"),
            "client_delay_max_ms": health.get("client_delay_max_ms"),
            "client_delay_over_10ms": health.get("client_delay_over_10ms"),
            "session_gap_p99_ms": pct(gaps, 0.99), "start_ms": start_span_ms(recs),
            "ends_together": describe_cohorts(end_cohorts(recs)),
            "gates": {g["name"]: g["status"] for g in res["gates"]}, "client": health}


COLUMNS = [("run", "run", "d"), ("requests", "requests", "d"), ("errors", "errors", "d"),
           ("requests_per_s", "req/s", ".0f"), ("client_cpu_ms_per_request", "CPU ms/req", ".2f"),
           ("peak_rss_mb", "RSS MB", ".0f"), ("loop_lag_p99_ms", "lag p99", ".1f"),
           ("loop_lag_max_ms", "lag max", ".1f"), ("client_delay_p99_ms", "delay p99", ".1f"),
           ("client_delay_max_ms", "delay max", ".1f"),
           ("client_delay_over_10ms", "over 10 ms", "d"), ("session_gap_p99_ms", "gap p99", ".1f"),
           ("start_ms", "start ms", ".1f"), ("steal_s", "steal s", ".2f")]

SPREAD = ("requests_per_s", "client_cpu_ms_per_request", "peak_rss_mb", "loop_lag_max_ms",
          "client_delay_p99_ms", "client_delay_max_ms")


def spread(rows: list[dict[str, Any]]) -> str:
    """Output: min-max over the runs of the main figures, one line."""
    parts = []
    for key in SPREAD:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            parts.append(f"{key} {min(values):.1f}-{max(values):.1f}")
    return "spread over the runs: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20, help="main-context steps per session")
    ap.add_argument("--step-tokens", type=int, default=500)
    ap.add_argument("--slots", type=int, default=64, help="simulator slots")
    ap.add_argument("--decode-us", type=float, default=None,
                    help="simulator decode cost per token (default: the agent-sim preset's 200 us)")
    ap.add_argument("--pin", action="store_true",
                    help="run the simulator on the last CPU and wl run on the others")
    ap.add_argument("--runs", type=int, default=1, help="runs in a row")
    ap.add_argument("--keep", help="keep each run's results.json / records.jsonl under DIR/runN")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    rows = []
    for n in range(1, args.runs + 1):
        out_dir = os.path.join(args.keep, f"run{n}") if args.keep else tempfile.mkdtemp(
            prefix="wl-scale-")
        os.makedirs(out_dir, exist_ok=True)
        try:
            row = {"run": n, **run_once(args, out_dir)}
        finally:
            if not args.keep:
                shutil.rmtree(out_dir, ignore_errors=True)
        rows.append(row)
        if "error" in row:
            print(f"run {n}: {row['error']}")
            continue
        print(f"run {n}: exit {row['exit_code']}, client_bottleneck "
              f"{row['client'].get('client_bottleneck')}, gates "
              + ", ".join(f"{k}={v}" for k, v in row["gates"].items())
              + f"; ends together: {row['ends_together']}", flush=True)
    done = [r for r in rows if "error" not in r]
    if done:
        print(table(done, COLUMNS))
        if len(done) > 1:
            print(spread(done))
    write_json(args.json, "scale", args, rows, started)
    return 0 if len(done) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
