"""The verdict table of docs/verdicts.md: every bundled benchmark on the simulator, healthy and
under each fault, and on llama-server when one is built; per run the exit code, the sessions'
verdicts, and per gate its status with how many of the values it read were exact, ranges and
unknown. Also how often a decisive first-token stamp (of an `isolated` request) is a range.

Each run is `wl run ... --no-viz --output F` in a child process, at small sizes so the whole
table takes a few minutes. llama-server runs when scripts/build-llama-server.sh has built it
(or `WL_LLAMA_SERVER` and `WL_LLAMA_MODEL` name one).

Usage: python -m bench.verdicts [--only agent-sim] [--faults healthy,degraded] [--no-llama|--no-sim]
Output: a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# small sizes per benchmark (the ground-truth tests' shapes)
SIM = {
    "agent-sim": ["--sessions", "3", "--main-tokens", "8k", "--step-tokens", "1k",
                  "--sub-tokens", "6k", "--finalize-tokens", "500", "--max-tokens", "16",
                  "--sim-prefill-us-per-token", "10", "--sim-decode-us-per-token", "100",
                  "--sim-device-tokens", "32000", "--sim-host-tokens", "400000",
                  "--sim-host-restore-us-per-token", "0.2"],
    "abort-sim": ["--context-tokens", "2k", "--thinking-tokens", "50", "--max-tokens", "2000",
                  "--settle", "100ms", "--sim-host-tokens", "65536"],
    "cache-pressure": ["--kv-size", "16384", "--context-tokens", "1000",
                       "--sim-device-tokens", "16384", "--sim-host-tokens", "4096"],
    "needle-test": ["--lengths", "2k,8k", "--sim-effective-context", "10000"],
    "perf-sim": ["--step-tokens", "8k", "--runs", "1", "--output-tokens", "64",
                 "--context-limit", "24k"],
}
FAULTS = [None, "evict_over_concurrency=1", "drop_aborted", "degraded", "degraded_host",
          "no_cached_report", "omit_cached_when_zero", "no_timings", "duplicate_blocks",
          "error_rate=0.1", "slow_prefill=3@*/finalize/*"]
LLAMA = {
    "agent-sim": ["--sessions", "2", "--main-tokens", "3k", "--step-tokens", "500",
                  "--sub-tokens", "1500", "--max-tokens", "16"],
    "abort-sim": ["--context-tokens", "1000", "--thinking-tokens", "50", "--max-tokens", "2000",
                  "--ignore-eos", "true"],
    "cache-pressure": ["--kv-size", "4096", "--context-tokens", "1000", "--margin", "2"],
    "needle-test": ["--lengths", "500,2000", "--needle-pos", "95%", "--temperature", "0"],
    "perf-sim": ["--step-tokens", "500", "--output-tokens", "32", "--runs", "1",
                 "--context-limit", "2k"],
}


def run(workload: str, args: list[str], salt: str = "verdicts") -> tuple[int, dict]:
    """Output: the exit code and the results JSON of one `wl run`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        code = subprocess.run([sys.executable, "-m", "workloadlang.cli", "run", workload,
                               "--no-viz", "--salt", salt, "--output", str(out), *args],
                              cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode
        return code, json.loads(out.read_text()) if out.exists() else {}


def gates_cell(res: dict, severity: str) -> str:
    """`name status e/r/u` for each gate of that severity, and `(N n/a)` for the scopes where
    its `when` condition was false."""
    return "; ".join(f"{g['name']} {g['status']} {g['exact']}/{g['ranges']}/{g['unknown']}"
                     + (f" ({g['not_applicable']} n/a)" if g.get("not_applicable") else "")
                     for g in res.get("gates", []) if g["severity"] == severity) or "–"


def verdict_cell(res: dict) -> str:
    counts: dict[str, int] = {}
    for v in res.get("verdicts", {}).values():
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n}× {v}" for v, n in sorted(counts.items())) or "–"


def decisive_ranges(res: dict) -> tuple[int, int]:
    """Output: (isolated requests with a first token, of them a TTFT that is a range)."""
    timed = [r for r in res.get("records", []) if r.get("isolated") and r.get("ttft_s")]
    return len(timed), sum(1 for r in timed if r.get("ttft_late_s"))


def row(workload: str, engine: str, code: int, res: dict) -> str:
    n, ranged = decisive_ranges(res)
    return (f"| {workload} | {engine} | {code} | {verdict_cell(res)} | "
            f"{gates_cell(res, 'fail')} | {gates_cell(res, 'warn')} | "
            f"{f'{ranged}/{n}' if n else '–'} |")


def llama_rows(only: str | None) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))  # the tests' llama-server helper
    from llama import find_llama, start_llama_server

    binary, model, why = find_llama()
    if binary is None:
        return [f"| (llama-server) | not built: {why} | | | | | |"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = start_llama_server(binary, model, Path(tmp) / "llama.log")
        try:
            for wl, args in LLAMA.items():
                if only in (None, wl):
                    code, res = run(wl, ["--base-url", server.base_url, *args])
                    rows.append(row(wl, "llama-server (1 slot)", code, res))
        finally:
            server.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="one benchmark")
    ap.add_argument("--faults", help="comma-separated simulator faults ('healthy' for none); "
                    "default: healthy and every fault")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-sim", action="store_true", help="llama-server's rows only")
    ns = ap.parse_args()
    faults = [] if ns.no_sim else FAULTS if ns.faults is None else [
        None if f == "healthy" else f for f in ns.faults.split(",")]
    print("| benchmark | engine | exit | verdicts | fail gates (status exact/range/unknown) "
          "| warn gates | decisive TTFT ranges |")
    print("|---|---|---|---|---|---|---|")
    for wl, args in SIM.items():
        if ns.only not in (None, wl):
            continue
        for fault in faults:
            extra = ["--sim-fault", fault] if fault else []
            code, res = run(wl, ["--sim", *args, *extra])
            print(row(wl, f"sim {fault or 'healthy'}", code, res), flush=True)
    if not ns.no_llama:
        for line in llama_rows(ns.only):
            print(line, flush=True)


if __name__ == "__main__":
    main()
