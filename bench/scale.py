"""Scale: the bundled agent-sim workload at 256 sessions x 20 main steps, run by the real `wl run`
CLI (a subprocess) against the simulator in ANOTHER subprocess.

Reports the client's peak RSS (`os.wait4` rusage of the `wl run` process: its own high-water mark,
not the simulator's), wall time, request and error counts, and the client timing health the
executor writes into the results (`results.client`): event-loop lag p99 / max (how late a 5 ms
sleep wakes up; `loop_lag_max_ran_ms`: how long the loop's thread ran in the worst one's
interval, 5 ms + the lag — much less when the operating system gave its CPU to something
else; about all of it when the client was busy or the VM's host did not run the CPU, see
`--perf`), client delay p99 / max (for every request, from the moment its session could go
on — the run's start, a phase barrier opening, the previous answer's last byte — to the send,
minus the planned wait and the wait for a concurrency slot) and `client_bottleneck` (either
p99 above 10 ms, and above 1 % of a median request). Targets (issue 3): peak RSS < 500 MB and
no request delayed by the client more than 10 ms beyond the concurrency limit. "Session gap"
is the same seen from the records: one request's end to the next one's start in the same
session. "Preempted": the client's involuntary context switches (rusage) and the VM's steal
time over the run (/proc/stat). "Ends together": answers whose last bytes arrived less than
2 ms apart (an engine ending a batch), the largest such cohort, and for the worst session gap
how many earlier answers were still waiting for their next send when its answer ended — one
event loop turns them around one after the other.

Step sizes are small so the run takes minutes: 20 main steps of 500 tokens (10k), 2 sub-agents of
1k, a 500-token finalize and 16-token replies: 23 requests a session, 5,888 in all. The simulator
uses the agent-sim preset's time model with an 8M-token device cache (no evictions) and 64 slots.

With `--pin --perf HZ` the kernel samples the client's CPUs meanwhile (`perf`, bench/cpuwindow.py;
needs root) and the report says what ran there during the worst client delay and the worst loop
lag: the client, other tasks, nothing (idle), or no sample at all (between busy samples: the VM's
host had the CPU).

With `--pin --steer-lo` loopback's receive processing runs on the simulator's CPU during the run
(`simproc.steer_loopback`: on loopback each write of the client otherwise also runs the
simulator's TCP receive work on the client's CPU). With `--perf` the report also says, for
every send later than 10 ms after its session could go on, how long the client itself ran in
that window (`late sends`): the rest of it other tasks had the CPU, or the VM's host.

With `--slow-calls MS` the client loads `bench/slowcalls` (a sitecustomize on its PYTHONPATH:
nothing of it is in `wl run`), which records its loop callbacks, the executor's steps and the
collector's passes that took longer than MS, and the report lists those in the worst delay.

Usage: /work/venv/bin/python bench/scale.py [--sessions 256] [--steps 20] [--step-tokens 500]
       [--slots 64] [--decode-us US] [--pin [--steer-lo] [--perf HZ [--stacks]]] [--keep DIR]
       [--slow-calls MS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


import cpuwindow
from simproc import free_port, split_cpus, start_sim, steer_loopback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def start_agent_sim(port: int, slots: int, decode_us: float | None,
                    cpus: set[int] | None) -> subprocess.Popen:
    extra = ["--decode-us-per-token", str(decode_us)] if decode_us is not None else []
    return start_sim(port, "--preset", "agent-sim", "--device-tokens", "8000000",
                     "--slots", str(slots), *extra, cpus=cpus)


def wl_command(reader_nice: int | None = None) -> list[str]:
    """Output: the command that runs `wl`; with `reader_nice`, one that first sets the socket
    reader thread's nice value (`run.transport.READER_NICE`)."""
    if reader_nice is not None:
        return [sys.executable, "-c", "import sys; from workloadlang.run import transport; "
                f"transport.READER_NICE = {int(reader_nice)}; from workloadlang.cli import main; "
                "sys.exit(main(sys.argv[1:]))"]
    script = os.path.join(os.path.dirname(sys.executable), "wl")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "workloadlang.cli"]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


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


def session_gaps(recs: list[dict]) -> list[float]:
    """Milliseconds from each request's end to the start of the next one in its session."""
    return [gap for _, gap in turns(recs)]


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


def first_sends(recs: list[dict]) -> dict[str, float]:
    """Output: each session's first send, in seconds from the run's start."""
    first: dict[str, float] = {}
    for r in recs:
        t = r["t_start_s"]
        if t is not None and (r["session"] not in first or t < first[r["session"]]):
            first[r["session"]] = t
    return first


def start_span_ms(recs: list[dict]) -> float | None:
    """Output: milliseconds from the first to the last of the sessions' first sends (all start
    together: the client writes them one after another), None without any send."""
    first = first_sends(recs)
    return (max(first.values()) - min(first.values())) * 1000 if first else None


def steal_s() -> float | None:
    """Output: the CPU time the VM's host has taken from this machine's CPUs so far (the `steal`
    column of /proc/stat, in seconds), or None where there is no such counter."""
    try:
        fields = open("/proc/stat").readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def late_sends(recs: list[dict], bound_ms: float = 10.0) -> list[tuple[float, float]]:
    """Output: (from, to) in seconds from the run's start for every send more than `bound_ms`
    after its session could go on: a first request later than that after the start, a
    session's next request later than that after its previous answer's end (`turns`)."""
    out = [(0.0, t) for t in first_sends(recs).values() if t * 1000 > bound_ms]
    out += [(end, end + gap / 1000) for end, gap in turns(recs) if gap > bound_ms]
    return sorted(out)


def own_shares(path: str, windows: list[tuple[float, float]], pid: int,
               freq: int) -> list[tuple[float, float, dict]]:
    """Input: a perf.data of `cpuwindow.start`, windows in unix seconds, the client's pid, the
    sampling rate. Output: (begin, end, `cpuwindow.account` of the window) for each window;
    perf's file is read once for windows less than 2 s apart."""
    out: list[tuple[float, float, dict]] = []
    group: list[tuple[float, float]] = []
    for w in sorted(windows) + [(float("inf"), float("inf"))]:
        if group and w[0] - max(e for _, e in group) > 2.0:
            rows = cpuwindow.samples(path, group[0][0] - 1.0, max(e for _, e in group) + 1.0)
            out += [(b, e, cpuwindow.account(rows, b, e, pid, freq)) for b, e in group]
            group = []
        group.append(w)
    return out


def describe_own(shares: list[tuple[float, float, dict]], bound_ms: float = 10.0) -> str:
    """Output: one line on the sends later than the bound: how many, the latest, and the most
    the client itself ran in any one's window — its own delay of that send (the rest of the
    window other tasks ran on its CPU, or the VM's host had the CPU)."""
    if not shares:
        return f"no send more than {bound_ms:g} ms after its session could go on"
    late = max(shares, key=lambda x: x[1] - x[0])
    own = max(shares, key=lambda x: x[2]["client"])
    verdict = "within" if own[2]["client"] <= bound_ms else "OVER"
    return (f"{len(shares)} sends more than {bound_ms:g} ms after their session could go on "
            f"(latest {(late[1] - late[0]) * 1000:.1f} ms); in any one's window the client "
            f"ran at most {own[2]['client']} ms ({verdict} {bound_ms:g} ms), in a "
            f"{(own[1] - own[0]) * 1000:.1f} ms window: {cpuwindow.describe(own[2])}")


def clock_origin(sent: list[dict]) -> float:
    """Output: the run's clock origin in unix time (each record has its send on both clocks)."""
    return statistics.median(r["t_send_unix"] - r["t_start_s"] for r in sent
                             if r["t_send_unix"] is not None and r["t_start_s"] is not None)


def print_slow_calls(path: str, sent: list[dict], health: dict, limit_ms: float) -> None:
    """Print what `bench/slowcalls` recorded in the client (`--slow-calls`): how many loop
    callbacks took longer than `limit_ms` during the run and the longest, then every entry
    (callbacks, the executor's steps in them, collections) that overlaps the worst client
    delay's window, in time order, at milliseconds from the window's beginning."""
    if not os.path.exists(path):
        print(f"{'slow calls':<19}none recorded (no file from the client)")
        return
    rows = [json.loads(line) for line in open(path)]
    origin = clock_origin(sent)
    t_last = max(r["t_start_s"] + (r["e2e_s"] or 0) for r in sent if r["t_start_s"] is not None)
    during = [r for r in rows if origin <= r["at"] <= origin + t_last]
    calls = [r for r in during if not r["what"].startswith(" ")]
    longest = max(calls, key=lambda r: r["ms"], default=None)
    print(f"{'slow calls':<19}{len(calls)} loop callbacks over {limit_ms:g} ms during the run"
          + (f", the longest {longest['ms']:.1f} ms ({longest['what']}) at "
             f"{longest['at'] - origin:.3f} s" if longest else ""))
    at, ms = health.get("client_delay_max_at_s"), health.get("client_delay_max_ms")
    if at is None or ms is None:
        return
    begin, end = origin + at - ms / 1000, origin + at
    inside = sorted((r for r in during if r["at"] < end and r["at"] + r["ms"] / 1000 > begin),
                    key=lambda r: r["at"])
    print(f"{'  in worst delay':<19}{ms:.1f} ms window at {at:.3f} s: " + ("; ".join(
        f"+{(r['at'] - begin) * 1000:.1f} {r['what'].strip()} {r['ms']:.1f} ms" for r in inside)
        or "no call over the limit"))


def print_cpu_windows(path: str, sent: list[dict], health: dict, pid: int, freq: int,
                      stacks: bool = False) -> None:
    """Print what ran on the client's CPUs during the worst client delay (from the moment its
    session could go on to its send) and the worst loop lag (the late 5 ms sleep); with
    `stacks`, also what the event loop's thread was doing there (`cpuwindow.summarise`)."""
    origin = clock_origin(sent)
    windows = [("worst delay", health["client_delay_max_ms"], health["client_delay_max_at_s"], 0),
               ("worst lag", health["loop_lag_max_ms"], health["loop_lag_max_at_s"], 5.0)]
    late = [(origin + b, origin + e) for b, e in late_sends(sent)]
    print(f"{'late sends (perf)':<19}"
          f"{describe_own(own_shares(path, late, pid, freq))}")
    for name, ms, at, base in windows:
        if at is None:
            continue
        end = origin + at
        parts = cpuwindow.split(path, end - (ms + base) / 1000, end, pid, freq)
        print(f"{name + ' (perf)':<19}{ms + base:.1f} ms at {at:.3f} s: "
              f"{cpuwindow.describe(parts)}")
        if stacks:
            chains = cpuwindow.chains(path, end - (ms + base) / 1000, end, pid)
            print(f"{'  loop thread':<19}{cpuwindow.summarise(chains, freq)}")


def client_env(args: argparse.Namespace, out_dir: str) -> dict[str, str]:
    """Output: the `wl run` process's environment: this one's, and with `--slow-calls` the
    `bench/slowcalls` diagnostic loaded (its records go to `out_dir`/slowcalls.jsonl)."""
    env = dict(os.environ)
    if args.slow_calls:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slowcalls")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env["WL_SLOWCALLS"] = os.path.join(out_dir, "slowcalls.jsonl")
        env["WL_SLOWCALLS_MS"] = str(args.slow_calls)
    return env


def run_client(args: argparse.Namespace, port: int, out_dir: str,
               wl_cpus: set[int] | None, sim_cpus: set[int] | None) -> tuple:
    """Start the simulator, run `wl run` against it (results in `out_dir`, sampled by perf with
    `--perf`), stop the simulator. Output: the `wl` process, its wait status and rusage, wall
    seconds, the VM's steal time meanwhile (None where unknown) and the client's stderr."""
    out, rec = os.path.join(out_dir, "results.json"), os.path.join(out_dir, "records.jsonl")
    sim = start_agent_sim(port, args.slots, args.decode_us, sim_cpus)
    cmd = [*wl_command(args.reader_nice), "run", "agent-sim", "--base-url", f"http://127.0.0.1:{port}/v1",
           "--no-viz", "--output", out, "--records", rec,
           "--sessions", str(args.sessions), "--main-tokens", str(args.steps * args.step_tokens),
           "--step-tokens", str(args.step_tokens), "--sub-tokens", "1k", "--sub-windows", "2",
           "--finalize-tokens", "500", "--max-tokens", "16"]
    print("$ wl", " ".join(cmd[cmd.index("run"):]), flush=True)
    sampler = (cpuwindow.start(wl_cpus, os.path.join(out_dir, "perf.data"), args.perf,
                               args.stacks) if args.perf else None)
    try:
        t0, steal0 = time.perf_counter(), steal_s()
        pin = (lambda: os.sched_setaffinity(0, wl_cpus)) if wl_cpus else None
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=pin, env=client_env(args, out_dir))
        _, status, usage = os.wait4(proc.pid, 0)
        wall, steal1 = time.perf_counter() - t0, steal_s()
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if sampler:
            cpuwindow.stop(sampler)
        sim.terminate()
        sim.wait(10)
    steal = None if steal0 is None or steal1 is None else steal1 - steal0
    return proc, status, usage, wall, steal, stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20, help="main-context steps per session")
    ap.add_argument("--step-tokens", type=int, default=500)
    ap.add_argument("--slots", type=int, default=64, help="simulator slots")
    ap.add_argument("--decode-us", type=float, default=None,
                    help="simulator decode cost per token (default: the agent-sim preset's 200 us)")
    ap.add_argument("--keep", help="keep results.json / records.jsonl in this directory")
    ap.add_argument("--reader-nice", type=int, default=None,
                    help="the socket reader thread's nice value (default: the transport's)")
    ap.add_argument("--pin", action="store_true",
                    help="run the simulator on the last CPU and wl run on the others")
    ap.add_argument("--steer-lo", action="store_true",
                    help="with --pin: run loopback's receive processing on the simulator's CPU "
                         "(needs root; put back afterwards), see simproc.steer_loopback")
    ap.add_argument("--perf", type=int, metavar="HZ", default=0,
                    help="with --pin: sample the client's CPUs with perf at HZ and say what ran "
                         "there during the worst client delay and the worst loop lag")
    ap.add_argument("--stacks", action="store_true",
                    help="with --perf: record call chains and say what the event loop's thread "
                         "was doing in those windows (system calls, page faults, its own code)")
    ap.add_argument("--slow-calls", type=float, metavar="MS", default=0,
                    help="record the client's loop callbacks, executor steps and collections "
                         "longer than MS (bench/slowcalls) and say which ran in the worst delay")
    args = ap.parse_args()
    if args.stacks and not args.perf:
        ap.error("--stacks needs --perf")
    if args.steer_lo and not args.pin:
        ap.error("--steer-lo needs --pin")
    if args.perf and (not args.pin or cpuwindow.available()):
        ap.error("--perf: " + (cpuwindow.available() or "needs --pin"))
    out_dir = args.keep or tempfile.mkdtemp(prefix="wl-scale-")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "results.json")
    port = free_port()
    wl_cpus, sim_cpus = split_cpus() if args.pin else (None, None)
    steer = steer_loopback(sim_cpus) if args.steer_lo else contextlib.nullcontext()
    with steer as before:
        proc, status, usage, wall, steal, stderr = run_client(args, port, out_dir, wl_cpus,
                                                              sim_cpus)
    code = os.waitstatus_to_exitcode(status)
    if not os.path.exists(out):
        print(f"wl run exited {code} without results:\n{stderr}")
        return 1
    res = json.loads(open(out).read())
    recs = res["records"]
    sent = [r for r in recs if not r["skipped"]]
    errors = [r for r in sent if r["error"]]
    print(f"exit code        {code} ({res['incomplete'] or 'complete'})")
    print(f"requests         {len(sent)} sent of {len(recs)} planned, {len(errors)} errors, "
          f"{args.sessions} sessions, concurrency {args.sessions}")
    print(f"wall             {wall:.1f} s ({len(sent) / wall:.0f} requests/s)")
    print(f"client CPU       {usage.ru_utime + usage.ru_stime:.1f} s "
          f"({(usage.ru_utime + usage.ru_stime) * 1000 / max(1, len(sent)):.2f} ms/request; "
          f"user {usage.ru_utime:.1f} s, system {usage.ru_stime:.1f} s)")
    print(f"peak client RSS  {usage.ru_maxrss / 1024:.0f} MB (target < 500 MB)")
    steal = "unknown" if steal is None else f"{steal:.2f} s"
    print(f"preempted        client {usage.ru_nivcsw} times (involuntary context switches); "
          f"VM steal time during the run {steal}")
    if args.steer_lo:
        print(f"loopback         receive processing on CPU {min(sim_cpus)}, the simulator's "
              f"(rps_cpus {before!r} before and after)")
    print(f"client health    {json.dumps(res['client'])}")
    gaps = session_gaps(recs)
    print(f"session gap      p50 {pct(gaps, 0.5):.1f} ms, p99 {pct(gaps, 0.99):.1f} ms, "
          f"max {max(gaps):.1f} ms ({sum(g > 10 for g in gaps)} of {len(gaps)} over 10 ms)")
    print(f"ends together    {describe_cohorts(end_cohorts(recs))}")
    span = start_span_ms(recs)
    if span is not None:
        print(f"start            the sessions' first sends took {span:.2f} ms, first to last")
    if args.perf:
        print_cpu_windows(os.path.join(out_dir, "perf.data"), sent, res["client"], proc.pid,
                          args.perf, args.stacks)
    if args.slow_calls:
        print_slow_calls(os.path.join(out_dir, "slowcalls.jsonl"), sent, res["client"],
                         args.slow_calls)
    gates = ", ".join(f"{g['name']}={g['status']}" for g in res["gates"])
    print(f"gates            {gates}")
    if not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
