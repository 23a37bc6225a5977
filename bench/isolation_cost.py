"""What timing the decisive measurements alone costs: the wall time of default agent-sim on the
simulator (`wl run agent-sim --sim`, 3 sessions), this checkout against itself with
`--no-isolation` (the same requests and phases sent with the others: no drain, no quiet wait,
nothing measured again) and, with `--against DIR`, against another checkout (a source tree of
another build, e.g. `git archive main | tar -x -C DIR`), run from that tree with this
interpreter. Runs are interleaved (this, no isolation, other; again), so a machine that gets
busier weighs on each alike; each is the whole `wl run` process.

Also from this checkout's runs: the results' `client` of what isolation and measuring again
cost (`isolation_wait_s`, `isolation_active_s`, `remeasures`, `remeasure_s`, `quiet_wait_s`).

Usage: python -m bench.isolation_cost [--runs 5] [--against DIR] [--json PATH]
Output: per variant the median wall time, the ratios of the medians of interleaved pairs, and
the cost fields.
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

from bench.harness import ROOT, add_json_argument, describe_machine, machine, write_json

COST = ("isolated_requests", "isolation_wait_s", "isolation_active_s", "quiet_wait_s",
        "remeasured_requests", "remeasures", "remeasure_s")


def wall(tree: Path, args: list[str]) -> tuple[float, dict]:
    """Output: the wall time of `wl run agent-sim --sim ARGS` from the source tree `tree`, and
    its results' `client`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "workloadlang.cli", "run", "agent-sim", "--sim",
                        "--no-viz", "--output", str(out), *args], cwd=tree, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        took = time.perf_counter() - t0
        client = json.loads(out.read_text()).get("client", {}) if out.exists() else {}
        return took, client


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--against", help="another checkout's source tree")
    add_json_argument(ap)
    ns = ap.parse_args(argv)
    started = machine()
    variants = {"this": (ROOT, []), "no isolation": (ROOT, ["--no-isolation"])}
    if ns.against:
        variants["other"] = (Path(ns.against).resolve(), [])
    times: dict[str, list[float]] = {k: [] for k in variants}
    costs: list[dict] = []
    for _ in range(ns.runs):
        for name, (tree, args) in variants.items():
            took, client = wall(tree, args)
            times[name].append(took)
            if name == "this":
                costs.append({k: client.get(k) for k in COST})
    print(f"machine: {describe_machine(started)}; {ns.runs} interleaved runs of each")
    rows = []
    for name in variants:
        med = statistics.median(times[name])
        ratios = [a / b for a, b in zip(times["this"], times[name])]
        rows.append({"variant": name, "median_s": round(med, 3),
                     "this_over_it": round(statistics.median(ratios), 3),
                     "range": [round(min(ratios), 3), round(max(ratios), 3)]})
        print(f"{name:>14}: median {med:.2f} s; this / it: median {statistics.median(ratios):.2f}x"
              f" ({min(ratios):.2f}-{max(ratios):.2f}x over the pairs)")
    for k in COST:
        vals = [c[k] for c in costs if c.get(k) is not None]
        if vals:
            print(f"{k:>20}: median {statistics.median(vals)}")
    write_json(ns.json, "isolation_cost", ns, rows, started, costs=costs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
