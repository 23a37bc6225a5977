"""Do two checkouts of workloadlang give the same records and results? The five bundled
benchmarks run on the simulator with one salt by each checkout's own `wl`, and every record
field that is not a time (nor derived from one) compared, then every part of the results file
(`--output`) that is not one: params, plan, engine, the calibration's sizing, the engine's
counters, gates, verdicts, report items, the cache theory, the counts of the performance.

Each checkout runs with its own interpreter (`CHECKOUT/.venv/bin/python`, else this one): a
worktree of an older commit with its own virtual environment compares the code before a change
with the code after it. The runs alternate between the two, workload by workload. `--base` may
be the checkout itself: the same code twice shows what differs from run to run.

What differs between two runs of the same plan on the simulator without being a difference of
the code: times (`TIMES`), what is derived from them (a speed, whether the timing backs the
cache's claim, a hit judged by TTFT), and the simulator's replies' text (they are seeded from
the request, so not even that). Everything else (ids, planned and reported token counts, cache
evidence, hits, errors, skips) must be equal. A field that one side never writes (a change added
it) is listed apart, as a change of the schema; so is the results file's `schema` (its version).

In a results file, the times are the run's start and length, the engine's address (a port of
the moment), the calibration's timings, the client's health (`client`: how late the client's
loop woke, its CPU time, ...), the performance's rates and spreads, and a report item that is a
fraction of a number or a duration (`report_format` `number` or `seconds`: a speed, a wait);
its counts, tokens, shares and gates are compared.

Usage: python -m bench.same_records --base DIR [--other DIR] [--salt S] [--only NAME,...]
       [--keep DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import ROOT, add_json_argument, describe_machine, machine, write_json

TIMES = frozenset({
    "t_start_s", "t_send_unix", "ttft_s", "ttft_content_s", "ttft_late_s", "ttft_contended_s",
    "prefill_contended_s", "isolation_wait_s", "isolation_held_s", "e2e_s", "server_ttft_ms",
    "server_prefill_ms", "pp_tps", "tg_tps", "ttft_per_uncached", "prefill_s", "ttft_agrees",
    "ttft_agrees_note", "timings", "itl_s", "itl", "tpot_s", "output_tps", "schedule_lag_s",
    "slo_met", "drift", "remeasured", "attempts"})

# the parts of a results file that are times or derived from them (see the module)
RESULTS_TIMES = frozenset({"schema", "started_at", "elapsed_s", "client", "records"})
CALIBRATION_TIMES = frozenset({
    "threshold_s", "cold_ttft_s", "hit_ttft_s", "cold_prefill_tps", "fixed_s", "hit_prefill_s",
    "cold_prefill_s", "cold_took_s", "separation", "too_quick_tokens"})
PERFORMANCE_COUNTS = ("requests", "completed", "excluded", "hit_rate")

# small sizes that still run every statement of each workload
WORKLOADS: dict[str, list[str]] = {
    "cache-pressure": ["--kv-size", "16384", "--context-tokens", "1000",
                       "--sim-device-tokens", "16384", "--sim-host-tokens", "0"],
    "needle-test": ["--sim-prefill-us-per-token", "20"],
    "agent-sim": ["--sessions", "3", "--main-tokens", "8k", "--step-tokens", "1k",
                  "--sub-tokens", "1500", "--finalize-tokens", "500", "--max-tokens", "16",
                  "--sim-prefill-us-per-token", "40", "--sim-decode-us-per-token", "100"],
    "abort-sim": [],
    "perf-sim": [],
}


def python_of(checkout: Path) -> str:
    venv = checkout / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run(checkout: Path, name: str, salt: str,
        folder: Path) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """Run `wl run NAME --sim` in `checkout`. Output: its exit code, its records and its results
    file."""
    records = folder / f"{name}.jsonl"
    cmd = [python_of(checkout), "-m", "workloadlang.cli", "run", name, "--sim", "--salt", salt,
           "--no-viz", "--records", str(records), "--output", str(folder / f"{name}.json"),
           *WORKLOADS[name]]
    proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    results = json.loads((folder / f"{name}.json").read_text())
    return proc.returncode, [r for r in rows if r.get("type") == "request"], results


def untimed(rec: dict[str, Any]) -> dict[str, Any]:
    """Output: `rec` without its times and what is derived from them (see the module)."""
    out = {k: v for k, v in rec.items() if k not in TIMES}
    if rec.get("hit_basis") == "ttft":
        out.pop("hit", None)
    return out


def new_fields(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> set[str]:
    """Output: the record fields that one side never writes and the other does (a field a
    change added or removed: a difference of the schema, listed apart, not of the values)."""
    fa = {k for r in a for k in r}
    fb = {k for r in b for k in r}
    return fa ^ fb


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """Output: what differs between two runs' records, by request id and field (fields only
    one side has at all left out: `new_fields`)."""
    by_a, by_b = {r["id"]: untimed(r) for r in a}, {r["id"]: untimed(r) for r in b}
    schema = new_fields(a, b)
    out = [f"only in one: {i}" for i in sorted(set(by_a) ^ set(by_b))]
    for rid in sorted(set(by_a) & set(by_b)):
        ra, rb = by_a[rid], by_b[rid]
        out += [f"{rid}.{k}: {ra.get(k)!r} != {rb.get(k)!r}"
                for k in sorted((set(ra) | set(rb)) - schema) if ra.get(k) != rb.get(k)]
    return out


def untimed_results(res: dict[str, Any]) -> dict[str, Any]:
    """Output: the results file `res` without its times and what is derived from them, nor its
    records (compared apart) and version (see the module)."""
    out = {k: v for k, v in res.items() if k not in RESULTS_TIMES}
    out["engine"] = {k: v for k, v in res["engine"].items() if k != "base_url"}
    out["calibration"] = {k: v for k, v in res["calibration"].items()
                          if k not in CALIBRATION_TIMES}
    perf = res.get("performance") or {}
    out["performance"] = {k: perf.get(k) for k in PERFORMANCE_COUNTS}
    formats = res.get("report_format", {})
    out["report"] = {k: v for k, v in res["report"].items()
                     if not timed(v, formats.get(k, "number"))}
    return out


def timed(value: Any, fmt: str) -> bool:
    """Output: whether a report item's value may be a time or derived from one: a fraction
    (or a group holding one) of format `number` or `seconds`."""
    if isinstance(value, dict):
        return any(timed(v, fmt) for v in value.values())
    return isinstance(value, float) and fmt in ("number", "seconds")


def results_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Output: what differs between two runs' results files, by part and key, besides their
    times, records and version (`untimed_results`)."""
    ua, ub = untimed_results(a), untimed_results(b)
    out = []
    for part in sorted(set(ua) | set(ub)):
        pa, pb = ua.get(part, ABSENT), ub.get(part, ABSENT)
        if isinstance(pa, dict) and isinstance(pb, dict):
            out += [f"results.{part}.{k}: {pa.get(k, ABSENT)!r} != {pb.get(k, ABSENT)!r}"
                    for k in sorted(set(pa) | set(pb)) if pa.get(k, ABSENT) != pb.get(k, ABSENT)]
        elif pa != pb:
            out.append(f"results.{part}: {str(pa)[:200]} != {str(pb)[:200]}")
    return out


class Absent:
    """A key one side does not write (not the same as one written as null)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = Absent()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the checkout to compare with")
    ap.add_argument("--other", default=str(ROOT), help="the other checkout (default: this one)")
    ap.add_argument("--salt", default="same-records")
    ap.add_argument("--only", help="comma-separated workload names")
    ap.add_argument("--keep", help="keep the runs' files in this folder")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(describe_machine(started))
    names = args.only.split(",") if args.only else list(WORKLOADS)
    sides = {"base": Path(args.base).resolve(), "other": Path(args.other).resolve()}
    folder = Path(args.keep or tempfile.mkdtemp(prefix="same-records-"))
    rows, same = [], True
    for name in names:
        got = {}
        for side, checkout in sides.items():
            where = folder / side
            os.makedirs(where, exist_ok=True)
            got[side] = run(checkout, name, args.salt, where)
        diff = differences(got["base"][1], got["other"][1]) + results_differences(
            got["base"][2], got["other"][2])
        codes = (got["base"][0], got["other"][0])
        ok = not diff and codes[0] == codes[1]
        same &= ok
        schema = sorted(new_fields(got["base"][1], got["other"][1]))
        versions = (got["base"][2].get("schema"), got["other"][2].get("schema"))
        rows.append({"workload": name, "records": len(got["other"][1]), "exit_codes": codes,
                     "same": ok, "differences": diff[:20], "fields_on_one_side": schema,
                     "results_schema": versions})
        print(f"{name}: {len(got['other'][1])} records, exit {codes[0]} / {codes[1]}: "
              + ("the same" if ok else f"{len(diff)} difference(s)")
              + (f" (fields written by one side only: {', '.join(schema)})" if schema else "")
              + (f" (results schema {versions[0]} / {versions[1]})"
                 if versions[0] != versions[1] else ""))
        for line in diff[:20]:
            print(f"  {line}")
    write_json(args.json, "same_records", args, rows, started)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
