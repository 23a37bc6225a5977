"""Where the test suite's time goes: the wall time of a run, and each test's time (pytest's
`--durations=0`, setup + call + teardown) summed per file and split into `alone` tests (run with
nothing else in flight, tests/scheduling.py), `paired` ones (beside another `paired` test at
most) and shared ones (two workers side by side).

Two workers can finish no sooner than the `alone` tests' time plus half the others' (`bound`);
the wall time over it is what the scheduling loses (a worker idle while a test waits for the
other's test of another kind to end, or a long file left to the end).

Usage: python -m bench.suite_time [--from OUTPUT] [--alone-list FILE] [--paired-list FILE]
       [--top 15] [--json PATH] [-- PYTEST ARGS]
Without `--from` it runs `python -m pytest -q -m "not llama" --durations=0 -p no:cacheprovider`
(or the PYTEST ARGS given, to which `--durations=0` is added) and reads its output; with
`--from` it reads a saved output instead. The `alone` and `paired` tests are collected from this
checkout (`-m alone`, `-m "paired and not alone"`) unless `--alone-list` and `--paired-list` name
files of their ids, one a line.
Output: a table of the files that took longest, the totals, and the tests that failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness import ROOT, add_json_argument, describe_machine, machine, table, write_json

DEFAULT = ["-q", "-m", "not llama", "-p", "no:cacheprovider"]
PHASE = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+(\S+::\S+)")
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed)\b.*?) in ([\d.]+)s", re.M)


def test_times(output: str) -> dict[str, float]:
    """Input: pytest's output with `--durations=0`. Output: seconds per test id (its setup,
    call and teardown summed)."""
    times: defaultdict[str, float] = defaultdict(float)
    for line in output.splitlines():
        m = PHASE.match(line)
        if m:
            times[m.group(2)] += float(m.group(1))
    return times


def summary(output: str) -> tuple[str, float | None]:
    """Input: pytest's output. Output: its last summary (`2054 passed, ...`) and its seconds."""
    found = SUMMARY.findall(output)
    return (found[-1][0], float(found[-1][1])) if found else ("", None)


def kind_ids(args: list[str], kind: str) -> set[str]:
    """Input: the pytest args of the run, a marker expression (`alone`). Output: the ids of the
    tests of that kind they select."""
    marks = [a for i, a in enumerate(args) if i and args[i - 1] == "-m"]
    select = " and ".join([f"({kind})", *(f"({m})" for m in marks)])
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "--collect-only",
                          "-p", "no:cacheprovider", "-m", select],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return {line.strip() for line in out.splitlines() if "::" in line}


KINDS = ("alone_s", "paired_s", "shared_s")


def per_file(times: dict[str, float], alone: set[str],
             paired: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
    """Input: seconds per test id, the `alone` ids, the `paired` ids. Output: a row per file,
    longest first: its `alone`, `paired` and shared seconds (pytest lists no test under 5 ms)."""
    files: dict[str, dict[str, Any]] = {}
    for test, seconds in times.items():
        name = test.split("::", 1)[0]
        row = files.setdefault(name, {"file": name, **{k: 0.0 for k in KINDS}})
        row["alone_s" if test in alone else "paired_s" if test in paired else "shared_s"] += seconds
    return sorted(files.values(), key=lambda r: -sum(r[k] for k in KINDS))


def totals(rows: list[dict[str, Any]], wall: float | None) -> dict[str, Any]:
    """Input: the per-file rows and the run's wall seconds. Output: the sums and the bound (the
    `alone` seconds, one at a time, and half the others', two at a time)."""
    alone, paired, shared = (sum(r[k] for r in rows) for k in KINDS)
    return {"wall_s": wall, "alone_s": round(alone, 1), "paired_s": round(paired, 1),
            "shared_s": round(shared, 1), "bound_s": round(alone + (paired + shared) / 2, 1)}


def run_suite(args: list[str]) -> tuple[str, float]:
    """Input: pytest args. Output: the run's output and its wall seconds."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "--durations=0"], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.stdout + proc.stderr, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.suite_time", description=__doc__)
    ap.add_argument("--from", dest="source", metavar="OUTPUT", help="a saved pytest output")
    ap.add_argument("--alone-list", metavar="FILE", help="the alone tests' ids, one a line")
    ap.add_argument("--paired-list", metavar="FILE", help="the paired tests' ids, one a line")
    ap.add_argument("--top", type=int, default=15, help="how many files to list")
    add_json_argument(ap)
    ap.add_argument("pytest_args", nargs="*", help="after `--`: pytest's args")
    args = ap.parse_args(argv)
    started = machine()
    pytest_args = args.pytest_args or DEFAULT
    if args.source:
        output = Path(args.source).read_text(encoding="utf-8")
        said, wall = summary(output)
    else:
        output, wall = run_suite(pytest_args)
        said = summary(output)[0]
    alone, paired = ((set(Path(listed).read_text(encoding="utf-8").split()) if listed
                      else kind_ids(pytest_args, kind))
                     for listed, kind in ((args.alone_list, "alone"),
                                          (args.paired_list, "paired and not alone")))
    rows = per_file(test_times(output), alone, paired)
    total = totals(rows, round(wall, 1) if wall is not None else None)
    print(f"# {describe_machine(started)}\n")
    print(table(rows[:args.top], [("file", "file", ""), ("alone_s", "alone s", ".1f"),
                                  ("paired_s", "paired s", ".1f"),
                                  ("shared_s", "shared s", ".1f")]))
    print(f"\n{said}: wall {total['wall_s']} s; alone tests {total['alone_s']} s, paired "
          f"{total['paired_s']} s, shared {total['shared_s']} s; bound (alone + (paired + "
          f"shared) / 2) {total['bound_s']} s")
    failed = [ln for ln in output.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    print("\n".join(["", *failed]) if failed else "", end="\n" if failed else "")
    write_json(args.json, "suite_time", args, rows, started, totals=total, summary=said,
               failed=failed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
