"""The confusion table of agent-sim's verdicts on a busy machine: for each case (what the engine
truly did, and what the host did meanwhile), over repeated runs, how many sessions got each
verdict, and how the runs exited. The truth is the simulator's configuration: `healthy` (a
two-tier engine whose context survives), `evicted` (a device the sub-agents empty, no host
tier), `degraded_host` (what comes back from the host tier is paid like a prefill and reported
cached), `degraded` (everything reported cached is recomputed).

What the host does:
- `quiet`: nothing besides (this machine's own load);
- `drift over finalize|baselines|both`: the simulator's `drift=3` window (everything 3x slower)
  opened by the first finalize (while it is served), by the first baseline (0.5 s), or by the
  first finalize for the rest of the run;
- `cpu over finalize|baselines|both`: two processes spinning on this machine's CPUs (started and
  stopped by PID) from the start until the engine answered the first finalize, from then to the
  end, or throughout (tests/cpuload.py; the simulator is served apart, to be watched);
- `64 sessions` (2k contexts, the engine's own prefill times) on the simulator and on one with
  almost no prefill cost;
- `fast 2k|4k|8k`: 2 sessions whose main context is that size on a simulator whose cold 4k
  prefill takes about 8 ms (over the client's TTFT a finalize of half such a context is too
  small to price a token: `undecidable`, said before sending).

With `--llama`, the cases are llama-server's instead (built by scripts/build-llama-server.sh,
started here): `llama cpu over finalize|baselines|both`, the healthy server under the same
placed load, and a real eviction (the server without its host-RAM cache, `--cache-ram 0`) under
the load throughout; agent-sim at tests/llama/test_groundtruth_busy_llama.py's small sizes, one
session, a salt of its own per run.

Run i of a case has 1, 2 or 8 sessions (i mod 3) and the engine's own prefill time or not
(i mod 2), so every case is measured at every size and both ways. Each run is `wl run` in a
child process.

Usage: python -m bench.busy_verdicts [--runs 10] [--only drift] [--llama] [--keep DIR]
       [--json PATH]
Output: a markdown table (sessions per verdict, runs per exit code) and, with --json, the
figures and the machine they were measured on; with --keep, each run's records and results in
DIR (`<case>-<run>.jsonl`, `.json`: what a verdict was judged on, to read why; `.load.json`: when
the placed load started and stopped, unix times).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness import ROOT, add_json_argument, describe_machine, machine, write_json

sys.path.insert(0, str(ROOT / "tests"))  # the tests' CPU load helper
from cpuload import placed_load, served_sim  # noqa: E402

BASE = ["--step-tokens", "2k", "--max-tokens", "64", "--sim-prefill-us-per-token", "10",
        "--sim-decode-us-per-token", "200"]


def shape(client: bool) -> tuple[int, list[str]]:
    """Output: the main context and the sizes (tests/e2e/test_groundtruth_degraded.py's
    `small`): 8k over the engine's own prefill time; over the client's TTFT 16k, so that the
    finalize agent-sim sizes to price a token apart from a busy host's noise (about 4k) is a
    quarter of it. Sub-agents of three quarters of it push it out; the finalize is agent-sim's
    default."""
    main = 16_000 if client else 8_000
    return main, ["--main-tokens", str(main), "--sub-tokens", str(main * 3 // 4), *BASE]
DRIFT = {"finalize": ["--sim-fault", "drift=3@*/finalize/*"],
         "baselines": ["--sim-fault", "drift=3@*/baseline/*", "--sim-drift-seconds", "0.5"],
         "both": ["--sim-fault", "drift=3@*/finalize/*", "--sim-drift-seconds", "60"]}
TRUTHS = ["healthy", "evicted", "degraded_host", "degraded"]
SIZES = [1, 2, 8]


def truth_args(truth: str, sessions: int, main: int) -> list[str]:
    """The simulator for `truth` at `sessions` sessions of a `main`-token context
    (tests/e2e/test_groundtruth_drift.py's `case_args`, and `degraded`: every cached token
    recomputed)."""
    if truth == "evicted":
        return ["--sim-device-tokens", str(main + 1_000)]
    out = ["--sim-device-tokens", str(sessions * (main + 2_000) + 2_000),
           "--sim-host-tokens", "400000", "--sim-host-restore-us-per-token", "0.2"]
    return out + (["--sim-fault", truth] if truth != "healthy" else [])


def expected(truth: str) -> str:
    return {"healthy": "ok", "evicted": "evicted"}.get(truth, "degraded")


def run(args: list[str], records: Path | None = None, keep: Path | None = None
        ) -> tuple[int, dict]:
    """Output: the exit code and the results JSON of `wl run agent-sim --sim ARGS` (without
    `--sim` when ARGS name an engine's `--base-url`); `keep`: where the results are written
    (and kept), else a temporary file."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or Path(tmp) / "r.json"
        extra = ["--records", str(records)] if records else []
        extra += [] if "--base-url" in args else ["--sim"]
        code = subprocess.run([sys.executable, "-m", "workloadlang.cli", "run", "agent-sim",
                               "--no-viz", "--output", str(out), *extra, *args],
                              cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode
        return code, json.loads(out.read_text()) if out.exists() else {}


def cases(only: str | None) -> list[tuple[str, str, object]]:
    """Output: (host, truth, how run i is made: i -> (args, cpu load placement or None))."""
    out: list[tuple[str, str, object]] = []

    def sized(truth: str, more: list[str]):
        def make(i: int):
            s, client = SIZES[i % 3], bool(i % 2)
            main, args = shape(client)
            timings = ["--sim-fault", "no_timings"] if client else []
            return ["--sessions", str(s), *args, *truth_args(truth, s, main), *more,
                    *timings], None
        return make

    for truth in TRUTHS:
        out.append(("quiet", truth, sized(truth, [])))
        for where, args in DRIFT.items():
            out.append((f"drift over {where}", truth, sized(truth, args)))
    for truth in TRUTHS[:3]:
        for where in ("over_finalize", "over_baselines", "both"):
            def load(i: int, truth=truth, where=where):
                return sized(truth, [])(i)[0], where
            out.append((f"cpu {where.replace('_', ' ')}", truth, load))
    for name, us in (("64 sessions", "2"), ("64 sessions, near-zero prefill", "0.01")):
        out.append((name, "healthy", lambda i, us=us: (SIXTY_FOUR + [
            "--sim-prefill-us-per-token", us], None)))
    for main in ("2k", "4k", "8k"):
        for truth in ("healthy", "degraded"):
            out.append((f"fast {main}", truth, lambda i, main=main, truth=truth: (FAST + [
                "--main-tokens", main, *(["--sim-fault", truth] if truth != "healthy" else []),
                *(["--sim-fault", "no_timings"] if i % 2 else [])], None)))
    return [c for c in out if only is None or c[0].startswith(only)]


LLAMA_AGENT = ["--sessions", "1", "--main-tokens", "1k", "--step-tokens", "500",
               "--sub-tokens", "500", "--finalize-tokens", "300", "--max-tokens", "16"]


def llama_cases(healthy: str, no_cache: str) -> list[tuple[str, str, object]]:
    """Output: the llama-server cases (see the module) against the servers at `healthy` and
    `no_cache` (base URLs)."""
    def make(url: str, where: str):
        return lambda i: ([*LLAMA_AGENT, "--base-url", url, "--salt", f"busy-{where}-{i}"],
                          where)
    out: list[tuple[str, str, object]] = [
        (f"llama cpu {where.replace('_', ' ')}", "healthy", make(healthy, where))
        for where in ("over_finalize", "over_baselines", "both")]
    return out + [("llama cpu both", "evicted", make(no_cache, "both"))]


def llama_servers(tmp: Path) -> list:
    """Output: two llama-servers started (tests/llama.py): the CI's, and one without its host-RAM
    cache. Raises SystemExit when llama-server is not built."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llama import find_llama, start_llama_server
    binary, model, why = find_llama()
    if binary is None or model is None:
        raise SystemExit(f"--llama: {why}")
    return [start_llama_server(binary, model, tmp / "llama.log"),
            start_llama_server(binary, model, tmp / "llama-nocache.log",
                               extra_args=["--cache-ram", "0"])]


SIXTY_FOUR = ["--sessions", "64", "--main-tokens", "2k", "--step-tokens", "1k", "--sub-tokens",
              "1k", "--sub-windows", "1", "--finalize-tokens", "300", "--max-tokens", "16",
              "--baselines", "2"]
FAST = ["--sessions", "2", "--step-tokens", "1k", "--sub-tokens", "1k", "--max-tokens", "16",
        "--sim-prefill-us-per-token", "2"]


@contextmanager
def placed(args: list[str], records: Path, where: str
           ) -> Iterator[tuple[list[str], list[tuple[str, float]]]]:
    """The CPU load placed `where` over the run of `args` writing `records`, by when its engine
    answered the first finalize (`tests/cpuload.py`): the simulator is served apart to be
    watched. Output (yielded): the run's arguments, and when the load started and stopped."""
    if "--base-url" in args:
        url = args[args.index("--base-url") + 1]
        with placed_load(records, where, n=2, url=url) as events:
            yield args, events
        return
    with served_sim(args) as (url, served), placed_load(records, where, 2, url) as events:
        yield served, events


def measure(make, runs: int, keep: Path | None = None) -> dict:
    """Output: for `runs` runs of a case, sessions per verdict, runs per exit code, the tries
    again and the seconds. `keep`: the path prefix each run's records and results are kept at
    (`<keep>-<run>.jsonl`, `.json`), else none are."""
    verdicts: Counter = Counter()
    codes: Counter = Counter()
    again, seconds = 0, []
    for i in range(runs):
        args, where = make(i)
        t0 = time.perf_counter()
        kept = Path(f"{keep}-{i}.json") if keep else None
        with tempfile.TemporaryDirectory() as tmp:
            rec = Path(f"{keep}-{i}.jsonl") if keep else Path(tmp) / "r.jsonl"
            if where:
                with placed(args, rec, where) as (served, events):
                    code, res = run(served, rec, kept)
                if keep:  # when the load ran, to read against the records' times
                    Path(f"{keep}-{i}.load.json").write_text(json.dumps(events))
            else:
                code, res = run(args, rec if keep else None, kept)
        seconds.append(time.perf_counter() - t0)
        codes[code] += 1
        verdicts.update(res.get("verdicts", {}).values() if res else ["(no results)"])
        again += (res.get("client") or {}).get("remeasures", 0) if res else 0
    return {"verdicts": dict(verdicts), "exit_codes": dict(codes), "remeasures": again,
            "median_s": sorted(seconds)[len(seconds) // 2]}


def row(host: str, truth: str, m: dict) -> dict:
    """Output: a case's row: sessions judged, of them called exactly what they are (`right`),
    the others by verdict (`wrong`: another finding, or the right one beside `unverified`)."""
    v = m["verdicts"]
    want = expected(truth)
    right = v.get(want, 0)
    return {"host": host, "truth": truth, "want": want, "sessions": sum(v.values()),
            "right": right, "wrong": {k: n for k, n in v.items() if k != want},
            "exit_codes": m["exit_codes"], "remeasures": m["remeasures"],
            "median_s": round(m["median_s"], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per case (default 10)")
    ap.add_argument("--only", help="the cases whose host starts so (`drift`, `cpu`, `fast`, ...);"
                    " with --llama, whose host and truth hold it (`over finalize`, `evicted`)")
    ap.add_argument("--llama", action="store_true",
                    help="llama-server's cases (scripts/build-llama-server.sh builds it)")
    ap.add_argument("--keep", type=Path,
                    help="a directory for each run's records and results")
    add_json_argument(ap)
    ns = ap.parse_args(argv)
    if ns.keep:
        ns.keep.mkdir(parents=True, exist_ok=True)
    if not ns.llama:
        return table(ns, cases(ns.only))
    with tempfile.TemporaryDirectory() as tmp:
        servers = llama_servers(Path(tmp))
        try:
            return table(ns, [c for c in llama_cases(*(s.base_url for s in servers))
                              if not ns.only or ns.only in f"{c[0]} {c[1]}"])
        finally:
            for s in servers:
                s.stop()


def table(ns: argparse.Namespace, todo: list[tuple[str, str, object]]) -> int:
    """Measure each case of `todo` `ns.runs` times; print the table, write the JSON. Output: 0."""
    started = machine()
    print(f"machine: {describe_machine(started)}; {ns.runs} runs per case")
    print("| host | truth | sessions judged | right | other verdicts (sessions) | exit codes (runs) "
          "| tries again | median s/run |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for host, truth, make in todo:
        name = f"{host}-{truth}".replace(" ", "_").replace(",", "")
        r = row(host, truth, measure(make, ns.runs, ns.keep / name if ns.keep else None))
        rows.append(r)
        wrong = ", ".join(f"{n}× {k}" for k, n in sorted(r["wrong"].items())) or "–"
        codes = ", ".join(f"{n}× {c}" for c, n in sorted(r["exit_codes"].items()))
        print(f"| {host} | {truth} | {r['sessions']} | {r['right']} {r['want']} | {wrong} | "
              f"{codes} | {r['remeasures']} | {r['median_s']} |", flush=True)
    write_json(ns.json, "busy_verdicts", ns, rows, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
