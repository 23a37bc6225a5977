"""Wall time of `wl plan` on every bundled workload at its default params, interpreter start
included (the issue's bar: under 1 s on the 2-core machine).

Each run is a fresh `wl plan NAME --salt bench [needed flags]` process with its output read
through a pipe, as a user's shell would. cache-pressure needs `--kv-size` (2,000,000 as in the
original tool's example: 255 contexts) and perf-sim the engine's context limit
(`--max-context 131072`). A warm-up run first (byte-compiles changed modules), then `--repeat`
timed runs per workload; reports median and max wall, and the median CPU (user + system).

Also times a bare interpreter (`python -c pass`) and a bare `import workloadlang.cli`, so the
part that is planning can be told from start-up. `--profile NAME` prints where one in-process
`wl plan NAME` spends its time (cProfile, cumulative).

Usage: /work/venv/bin/python bench/plan_speed.py [--repeat 7] [--check] [--profile agent-sim]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stdout

FLAGS = {
    "abort-sim": [],
    "agent-sim": [],
    "cache-pressure": ["--kv-size", "2000000"],
    "needle-test": [],
    "perf-sim": ["--max-context", "131072"],
}
TARGET_S = 1.0


def wl_command() -> list[str]:
    script = shutil.which("wl", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "workloadlang.cli"]


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def measure(cmd: list[str], repeat: int) -> dict[str, float | str]:
    _, _, first = timed(cmd)  # warm-up: byte-compile, Lark's grammar cache
    runs = [timed(cmd) for _ in range(repeat)]
    walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
    return {"median": statistics.median(walls), "max": max(walls),
            "cpu": statistics.median(cpus), "first_line": first.splitlines()[1] if first else ""}


def requests_of(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("requests "):
            return line.split()[-1]
    return "?"


def profile(name: str) -> None:
    from workloadlang import cli

    prof = cProfile.Profile()
    sink = io.StringIO()
    prof.enable()
    with redirect_stdout(sink):
        cli.main(["plan", name, "--salt", "bench", *FLAGS[name]])
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--check", action="store_true", help=f"exit 1 if a median is >= {TARGET_S} s")
    ap.add_argument("--profile", metavar="NAME", help="cProfile one in-process plan instead")
    args = ap.parse_args()
    if args.profile:
        profile(args.profile)
        return 0
    wl = wl_command()
    print(f"python {sys.version.split()[0]} · {os.cpu_count()} CPUs · load average "
          f"{os.getloadavg()[0]:.2f} · {args.repeat} runs each after a warm-up\n")
    rows = [("python -c pass", measure([sys.executable, "-c", "pass"], args.repeat), "–"),
            ("import workloadlang.cli", measure([sys.executable, "-c", "import workloadlang.cli"],
                                                args.repeat), "–")]
    worst = 0.0
    for name, flags in FLAGS.items():
        cmd = [*wl, "plan", name, "--salt", "bench", *flags]
        m = measure(cmd, args.repeat)
        n = requests_of(timed(cmd)[2])
        rows.append((" ".join(["wl plan", name, *flags]), m, n))
        worst = max(worst, float(m["median"]))
    print(f"{'command':<52} {'requests':>8} {'median':>8} {'max':>8} {'CPU':>8}")
    for label, m, n in rows:
        print(f"{label:<52} {n:>8} {m['median']:>7.3f}s {m['max']:>7.3f}s {m['cpu']:>7.3f}s")
    print(f"\nslowest median {worst:.3f} s (target < {TARGET_S} s): "
          f"{'ok' if worst < TARGET_S else 'MISSED'}")
    return 1 if args.check and worst >= TARGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
