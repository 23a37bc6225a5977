"""How steady this machine's CPU is: the same fixed piece of Python work, timed again and again
on one CPU, first with the other CPUs idle, then with a busy process on another CPU.

On a dedicated machine the times stay within a few percent of each other. On a virtual machine
whose host runs other guests they can spread by a factor of two from one round to the next.
That spread is the floor under any latency bound of the client (docs/performance.md, "Scale"):
the event loop's work takes as long as the host lets it.

Usage: /work/venv/bin/python bench/cpu_steady.py [--cpu N] [--rounds 30] [--sets 3]
Output: per set and condition, the round's time: min, median, max (ms), and max / min.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def work() -> dict[int, str]:
    """The fixed piece of work: 300,000 dictionary stores of fresh strings (~40 ms here)."""
    d: dict[int, str] = {}
    for i in range(300_000):
        d[i & 1023] = str(i)
    return d


def rounds(n: int) -> list[float]:
    """Output: the seconds each of `n` runs of `work` took, on this process's CPU."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        work()
        out.append(time.perf_counter() - t)
    return out


def describe(times: list[float]) -> str:
    """Output: min, median and max in ms, and max / min."""
    lo, mid, hi = min(times), statistics.median(times), max(times)
    return (f"min {lo * 1000:5.1f}  median {mid * 1000:5.1f}  max {hi * 1000:5.1f} ms  "
            f"max/min {hi / lo:.2f}")


def busy_elsewhere(cpu: int) -> subprocess.Popen | None:
    """Output: a process spinning on another CPU than `cpu` (None on a one-CPU machine)."""
    others = sorted(os.sched_getaffinity(0) - {cpu})
    if not others:
        return None
    return subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {others[-1]}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sets", type=int, default=3)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    print(f"CPU {args.cpu}, {args.rounds} rounds a set")
    for k in range(args.sets):
        print(f"set {k + 1}  other CPUs idle  {describe(rounds(args.rounds))}")
        spinner = busy_elsewhere(args.cpu)
        try:
            time.sleep(0.2)
            print(f"set {k + 1}  another CPU busy {describe(rounds(args.rounds))}")
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
