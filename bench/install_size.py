"""What `pip install .` (no extras) puts on disk, and how long `wl` takes to start from it.

Input: `--checkout DIR` (default: this repository; another checkout gives a before figure),
`--repeat N` timed runs of each command (after an untimed warm-up that byte-compiles), or
`--venv DIR` to measure an environment already installed instead of making one. Output: the
size of the venv's site-packages as `du` counts it (disk blocks), the largest distributions in
it, and the median wall and CPU time of fresh `wl` processes run from a folder outside the
checkout (CPU: the process and its children, the simulator of a run among them):
`wl --help`, `wl plan agent-sim`, a small `wl run agent-sim --sim` (one session), the same run
with `--report`, and `wl report` of its results. With `--json PATH` the figures go to a file.

Usage: python -m bench.install_size [--checkout DIR] [--repeat 5] [--keep DIR] [--json PATH]
       python -m bench.install_size --venv DIR [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, add_json_argument, describe_machine, machine, table, write_json

# a context whose cold prefill is slow enough for timing to tell a recompute (as the wheel test)
SMALL_RUN = ["agent-sim", "--sim", "--no-viz", "--sessions", "1", "--main-tokens", "2k",
             "--step-tokens", "500", "--sub-tokens", "500", "--finalize-tokens", "300",
             "--sim-prefill-us-per-token", "40"]

# Run inside the measured venv: each distribution's size from its RECORD (what pip installed).
DIST_SIZES = """import json, os
from importlib import metadata
out = {}
for d in metadata.distributions():
    total = 0
    for f in d.files or ():
        p = f.locate()
        if os.path.isfile(p):
            total += os.stat(p).st_blocks * 512
    out[d.metadata["Name"]] = out.get(d.metadata["Name"], 0) + total
print(json.dumps(out))
"""


def make_venv(checkout: Path, folder: Path) -> tuple[Path, float]:
    """Input: a checkout and an empty folder. Output: the venv made there with `pip install
    CHECKOUT` (no extras), and the install's wall seconds."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    t0 = time.perf_counter()
    subprocess.run([str(folder / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                    str(checkout)], check=True)
    return folder, time.perf_counter() - t0


def site_packages(venv: Path) -> Path:
    """Input: a venv. Output: its site-packages folder (purelib)."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def disk_usage(folder: Path) -> int:
    """Input: a folder. Output: bytes of disk blocks under it, each inode once (as `du`)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total + os.lstat(folder).st_blocks * 512


def dist_sizes(venv: Path) -> dict[str, int]:
    """Input: a venv. Output: bytes on disk per installed distribution."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c", DIST_SIZES], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Input: a command and its folder. Output: (wall seconds, CPU seconds of it and its
    children: a run's simulator too); SystemExit when it fails (a run's failed gate, exit 1, is
    a verdict of the loaded machine, not a failure here)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def commands(wl: str) -> list[tuple[str, list[str]]]:
    """Input: the venv's `wl`. Output: (name, argv) of the timed commands, in order (the
    report reads the results the run before it wrote)."""
    return [("wl --help", [wl, "--help"]),
            ("wl plan agent-sim", [wl, "plan", "agent-sim", "--salt", "bench"]),
            ("wl run agent-sim --sim (1 session)", [wl, "run", *SMALL_RUN, "-o", "r.json"]),
            ("... --report", [wl, "run", *SMALL_RUN, "-o", "r2.json", "--report", "r2.html"]),
            ("wl report r.json", [wl, "report", "r.json", "-o", "r.html"])]


def time_commands(venv: Path, repeat: int) -> list[dict[str, object]]:
    """Input: a venv and the timed runs per command. Output: a row per command (median and
    max wall seconds, median CPU seconds), each run in a folder outside the checkout."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="wl-start-") as tmp:
        cwd = Path(tmp)
        for name, cmd in commands(str(venv / "bin" / "wl")):
            timed(cmd, cwd)  # warm-up: byte-compiles, fills Lark's grammar cache
            runs = [timed(cmd, cwd) for _ in range(repeat)]
            rows.append({"command": name, "median_s": statistics.median(w for w, _ in runs),
                         "max_s": max(w for w, _ in runs),
                         "cpu_s": statistics.median(c for _, c in runs)})
    return rows


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Input: the parsed arguments. Output: the venv's site-packages bytes, its distributions'
    sizes (largest first), the install's seconds (None for `--venv`) and the timed rows."""
    with tempfile.TemporaryDirectory(prefix="wl-venv-") as tmp:
        install_s = None
        if args.venv:
            venv = Path(args.venv)
        else:
            venv, install_s = make_venv(Path(args.checkout).resolve(),
                                        Path(args.keep) if args.keep else Path(tmp) / "v")
        return {"site": disk_usage(site_packages(venv)), "install_s": install_s,
                "dists": sorted(dist_sizes(venv).items(), key=lambda kv: -kv[1]),
                "rows": time_commands(venv, args.repeat)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.install_size", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", default=str(ROOT), help="the tree to install")
    ap.add_argument("--venv", help="measure this installed venv instead")
    ap.add_argument("--keep", help="make the venv here and keep it")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=8, help="largest distributions to list")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    m = measure(args)
    print(f"site-packages: {m['site'] / 1e6:.1f} MB ({m['site'] / 2**20:.1f} MiB)"
          + (f", pip install took {m['install_s']:.0f} s" if m["install_s"] is not None else ""))
    print("largest: " + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in m["dists"][:args.top]))
    print(table(m["rows"], [("command", "command", ""), ("median_s", "median s", ".2f"),
                            ("max_s", "max s", ".2f"), ("cpu_s", "CPU s", ".2f")]))
    write_json(args.json, "install_size", args, m["rows"], started,
               site_packages_bytes=m["site"], install_s=m["install_s"],
               distributions=dict(m["dists"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
