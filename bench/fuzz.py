"""Fuzz the frontend at scale: the properties of tests/language/test_fuzz.py over many more
examples, and the hostile sources of tests/language/test_hostile_source.py at full size.

    python -m bench.fuzz [N]                 # N examples in all (default 10000)
    python -m bench.fuzz --hostile [BYTES]   # every hostile class at BYTES (default 10 MB)
    python -m bench.fuzz --engine [BYTES]    # every hostile engine at BYTES (default 100 MB)

Input: none (the bundled workloads, the grammar's keywords, tests/hostile.py). Output: the
number of examples run and the wall time; with `--hostile`, one line per class and command:
exit code, first diagnostic, peak memory and wall time (the classes of tests/hostile.py: bad
encodings, nesting, numbers and sizes, and the constructs: draws, texts, forks, sweeps, tool
calls, traces). Exit status 1 if any example broke the
property (Hypothesis prints the smallest failing text) or a hostile source was answered with a
traceback, another exit code or diagnostic than expected, or more than 500 MB. With
`--engine`, one line per engine of tests/e2e/test_hostile_engine.py sending BYTES (a token
flood, fat tokens, a JSON answer, a line without end, a /models answer): `wl run`'s exit code, the
error kinds recorded, its peak memory (at most 200 MB) and wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), *(str(ROOT / "tests" / d) for d in ("", "language", "e2e"))]

import test_fuzz  # noqa: E402  (the strategies and the property live with the tests)
from hypothesis import given, settings  # noqa: E402


def run(strategy, examples: int) -> int:
    """Check the property on `examples` inputs drawn from `strategy`; how many ran."""
    count = 0

    @settings(test_fuzz.SETTINGS, max_examples=examples, database=None)
    @given(strategy)
    def property_holds(text: str) -> None:
        nonlocal count
        count += 1
        test_fuzz.assert_only_diagnostics(text)

    property_holds()
    return count


def main(total: int) -> int:
    start = time.perf_counter()
    plan = [("edited bundled workloads", test_fuzz.edited(), total // 2),
            ("keyword soups", test_fuzz.soups, total // 4),
            ("keyword soups in a workload", test_fuzz.wrapped_soups,
             total - total // 2 - total // 4)]
    done = 0
    for label, strategy, examples in plan:
        ran = run(strategy, examples)
        done += ran
        print(f"{label}: {ran} examples")
    print(f"total: {done} examples in {time.perf_counter() - start:.1f} s wall, no failures")
    return 0


def hostile_main(size: int) -> int:
    """Every hostile class of tests/hostile.py at `size` bytes through `wl check` and `wl plan`."""
    import re
    import tempfile

    from test_hostile_source import PEAK_MB

    import hostile

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.wl"
        for case in hostile.sources(size):
            path.write_bytes(case.data)
            for command, code in (("check", case.check), ("plan", case.plan_code)):
                start = time.perf_counter()
                run = hostile.measured(command, str(path), timeout=600)
                took = time.perf_counter() - start
                got = re.search(r"error\[(WL\d+)\]", run.stderr.split("\n", 1)[0])
                shown = got.group(1) if got else "-"
                ok = ("Traceback" not in run.stderr and run.peak_mb < PEAK_MB
                      and run.returncode == (2 if code else 0) and (code is None or shown == code))
                bad += not ok
                print(f"{case.name:34} {len(case.data) / 1e6:6.2f} MB  wl {command:5} exit "
                      f"{run.returncode}  {shown:5}  peak {run.peak_mb:5.0f} MB  {took:5.1f} s"
                      + ("" if ok else f"  UNEXPECTED (want {code or 'exit 0'})"), flush=True)
    print(f"{'no' if not bad else bad} unexpected answer{'s' * (bad != 1)}")
    return 1 if bad else 0


def engine_main(size: int) -> int:
    """Every hostile engine of tests/e2e/test_hostile_engine.py sending `size` bytes, against
    `wl run`: exit code, error kinds, peak memory."""
    import json
    import tempfile

    from test_hostile_engine import ENGINES, KEY, PEAK_MB, WORKLOAD

    import hostile
    from faultserver import FaultServer

    sizes = {"flood": {"x-tokens": str(size // 70)},
             "fat_tokens": {"x-tokens": str(size // 65536), "x-bytes": "65536"},
             "huge_json": {"x-bytes": str(size)}, "no_newline": {"x-bytes": str(size)}}
    bad = 0
    with FaultServer() as server, tempfile.TemporaryDirectory() as tmp:
        wl, out = Path(tmp) / "w.wl", Path(tmp) / "out.json"
        wl.write_text(WORKLOAD)
        for fault, (code, kind, opts) in [*ENGINES.items(), ("/models", (3, "-", {}))]:
            server.reset()
            server.defaults = {"x-fault": fault, **opts, **sizes.get(fault, {})}
            server.models_bytes = size if fault == "/models" else 0
            out.unlink(missing_ok=True)
            start = time.perf_counter()
            run = hostile.measured("run", str(wl), "--base-url", server.base_url, "--no-viz",
                                   "--api-key", KEY, "--idle-timeout", "1", "-o", str(out),
                                   timeout=600)
            took = time.perf_counter() - start
            kinds = sorted({(r["error"] or {}).get("kind") or ("impossible" if r["impossible"]
                                                                else "ok")
                            for r in json.loads(out.read_text())["records"]}) \
                if out.exists() else ["-"]
            ok = (run.returncode == code and "Traceback" not in run.stderr
                  and run.peak_mb < PEAK_MB and kinds == [kind])
            bad += not ok
            print(f"{fault:20} exit {run.returncode}  {','.join(kinds):10}  peak "
                  f"{run.peak_mb:5.0f} MB  {took:5.1f} s" + ("" if ok else "  UNEXPECTED"),
                  flush=True)
    print(f"{'no' if not bad else bad} unexpected answer{'s' * (bad != 1)}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--engine":
        sys.exit(engine_main(int(float(sys.argv[2])) if len(sys.argv) > 2 else 100_000_000))
    if len(sys.argv) > 1 and sys.argv[1] == "--hostile":
        sys.exit(hostile_main(int(float(sys.argv[2])) if len(sys.argv) > 2 else 10_000_000))
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
