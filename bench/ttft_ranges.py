"""How often a decisive first-token stamp is a range (`ttft_late_s` set: the first token came in
one read with more of the stream, so its TTFT may be shorter than stamped).

Runs agent-sim a few times on three engines: the simulator (its agent-sim preset: 200 us decode
steps), the simulator with 1 ms decode steps, and llama-server when one is built (else left
out). Decisive requests are those timed alone (`isolated`) when the run has any; otherwise (a
build before `isolated` existed) the finalize and the last three warm main turns of each
session, what its gates read. Prints, per engine: runs, decisive requests, of them ranges (and
the share), the largest range as a share of its TTFT, and the same over every request.

Usage: python -m bench.ttft_ranges [--wl PATH_TO_wl] [--runs 3] [--main-tokens 40k] [--no-llama]
`--wl` runs another install (a venv's `bin/wl`), to compare builds on the same machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

AGENT = ["--sessions", "3", "--step-tokens", "4k", "--sub-tokens", "10k", "--finalize-tokens", "2k",
         "--max-tokens", "32"]


def run(wl: str, args: list[str], salt: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        subprocess.run([wl, "run", "agent-sim", "--no-viz", "--salt", salt, "--output", str(out),
                        *AGENT, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(out.read_text()) if out.exists() else {}


def decisive(records: list[dict]) -> list[dict]:
    timed = [r for r in records if r.get("ttft_s")]
    if any(r.get("isolated") for r in timed):
        return [r for r in timed if r.get("isolated")]
    out = []
    for s in {r["session"] for r in timed}:
        mains = [r for r in timed if r["session"] == s and r["label"] == "main" and r["index"]]
        out += mains[-3:] + [r for r in timed if r["session"] == s and r["label"] == "finalize"]
    return out


def share(rs: list[dict]) -> str:
    late = [r for r in rs if r.get("ttft_late_s")]
    worst = max((r["ttft_late_s"] / r["ttft_s"] for r in late), default=0.0)
    pct = 100 * len(late) / len(rs) if rs else 0.0
    return f"{len(late)}/{len(rs)} ({pct:.1f} %), widest {100 * worst:.0f} % of its TTFT"


def engines(no_llama: bool) -> list[tuple[str, list[str], object]]:
    out: list[tuple[str, list[str], object]] = [
        ("simulator (200 us decode)", ["--sim"], None),
        ("simulator (1 ms decode)", ["--sim", "--sim-decode-us-per-token", "1000"], None)]
    if not no_llama:
        sys.path.insert(0, str(ROOT / "tests"))  # the tests' llama-server helper
        from llama import find_llama
        binary, model, _ = find_llama()
        if binary is not None and model is not None:
            out.append(("llama-server", [], (binary, model)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wl", default=str(Path(sys.executable).parent / "wl"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--main-tokens", default="40k", help="agent-sim's main context on the simulator")
    ap.add_argument("--no-llama", action="store_true")
    ns = ap.parse_args()
    print("| engine | runs | decisive TTFTs that are ranges | every TTFT |")
    print("|---|---|---|---|")
    for name, args, llama in engines(ns.no_llama):
        server = None
        if llama is not None:
            from llama import start_llama_server  # on the path: `engines`
            server = start_llama_server(*llama, Path(tempfile.mkdtemp()) / "llama.log")
            args = ["--base-url", server.base_url, "--main-tokens", "3k", "--step-tokens",
                    "500", "--sub-tokens", "1500", "--finalize-tokens", "500",
                    "--sessions", "2"]
        else:
            args = [*args, "--main-tokens", ns.main_tokens]
        try:
            results = [run(ns.wl, args, f"ranges-{k}") for k in range(ns.runs)]
        finally:
            if server is not None:
                server.stop()
        recs = [r for res in results for r in res.get("records", [])]
        picked = [r for res in results for r in decisive(res.get("records", []))]
        print(f"| {name} | {len(results)} | {share(picked)} | "
              f"{share([r for r in recs if r.get('ttft_s')])} |", flush=True)


if __name__ == "__main__":
    main()
