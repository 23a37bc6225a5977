"""How long `wl report` takes, and how big its page gets, for large results files.

Input: `--requests N` (default 10,000) and `--kinds` (default: every kind). For each kind it
builds a synthetic results file of about N requests (workloadlang.report.sample), writes it as
JSON, then times `python -m workloadlang.report FILE -o FILE.html` in a fresh process (the wall
time a person waits, interpreter start and imports included) and, warm, the in-process render.
Each timing is the best of `--repeat` tries (default 3), as CPU time (user + system of the
process) and wall time: on a shared machine the wall time also counts the waits for a core.
Output: a table on stdout (and with `--json PATH` the figures in a file); exit 1 with `--check`
when a report takes >= 3 s (wall, best of the tries) or is >= 5 MB.

Usage: python -m bench.report_scale [--requests 10000] [--repeat 3] [--kinds K,...] [--check]
       [--keep DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import add_json_argument, describe_machine, machine, table, write_json
from workloadlang.report import sample
from workloadlang.report.render import render_html

LIMIT_S, LIMIT_MB = 3.0, 5.0


def build(kind: str, n: int):
    """A synthetic `Results` of `kind` with about `n` requests."""
    if kind == "sessions":  # agent-sim: 100 sessions of n/100 requests, plus speed (main grows)
        return sample.agent(sessions=100, steps=max(1, n // 100 - 3), subs=2)
    if kind == "retention":  # cache-pressure: n/2 contexts hydrated and verified
        return sample.retention(contexts=n // 2, retained=n // 2 - 1, kv_size=4096 * n)
    if kind == "speed":  # perf-sim: 10 runs of n/10 levels
        return sample.perf(runs=10, steps=n // 10, step_tokens=100)
    if kind == "abort":
        return sample.abort(runs=n // 2)
    if kind == "needles":
        return sample.needles(lengths=[1000 + 40 * k for k in range(n)], window=200000)
    raise ValueError(kind)


KINDS = ["sessions", "retention", "speed", "abort", "needles"]


def run_report(src: Path, out: Path) -> tuple[float, float]:
    """Run the report in a fresh process. Output: (wall s, CPU s of that process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workloadlang.report", str(src), "-o", str(out)],
                   check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(kind: str, n: int, folder: Path, repeat: int) -> dict:
    """Input: a kind, a size, a scratch folder, tries. Output: sizes and best times."""
    res = build(kind, n)
    src = folder / f"{kind}.json"
    src.write_text(res.to_json(), encoding="utf-8")
    out = folder / f"{kind}.html"
    runs = [run_report(src, out) for _ in range(repeat)]
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        render_html([res])
        warm.append(time.perf_counter() - t0)
    return {"kind": kind, "requests": len(res.records), "json_mb": src.stat().st_size / 1e6,
            "html_mb": out.stat().st_size / 1e6, "wall_s": min(w for w, _ in runs),
            "cpu_s": min(c for _, c in runs), "render_s": min(warm)}


COLUMNS = [("kind", "kind", ""), ("requests", "requests", ",d"), ("json_mb", "JSON MB", ".2f"),
           ("html_mb", "HTML MB", ".2f"), ("wall_s", "wall s", ".2f"), ("cpu_s", "CPU s", ".2f"),
           ("render_s", "render s", ".2f")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--check", action="store_true", help=f"exit 1 past {LIMIT_S} s or {LIMIT_MB} MB")
    ap.add_argument("--repeat", type=int, default=3, help="tries per kind (the best counts)")
    ap.add_argument("--keep", help="write the files here instead of a temporary folder")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for kind in args.kinds.split(","):
            rows.append(measure(kind, args.requests, folder, args.repeat))
            print(f"{kind}: done", flush=True)
    print(table(rows, COLUMNS))
    ok = all(m["wall_s"] < LIMIT_S and m["html_mb"] < LIMIT_MB for m in rows)
    write_json(args.json, "report_scale", args, rows, started)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
