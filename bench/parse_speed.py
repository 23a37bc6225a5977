"""CPU time of parsing `.wl` text into the IR (`workloadlang.parse.parse`, in this process):
every bundled workload, a large workload (agent-sim with its session written out many times,
near the token limit) and, for the error path, the same large workload with a misspelt keyword
at its end (`sesion`: the diagnostic and its did-you-mean).

Each case is parsed once untimed (Lark's grammar cache, the parser built), then `--repeat`
times; reports the median and best CPU time per parse (`time.process_time`, so waits for a CPU
on a loaded machine do not count) and the text's size.

Usage: python -m bench.parse_speed [--repeat 21] [--copies 60] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench.harness import add_json_argument, describe_machine, machine, table, write_json
from workloadlang.diagnostics import WorkloadError
from workloadlang.parse import parse
from workloadlang.resources import bundled_workload_path, bundled_workloads


def large_workload(copies: int) -> str:
    """agent-sim with its `session main` written out `copies` times (`main0`, `main1`, ...)."""
    text = bundled_workload_path("agent-sim").read_text(encoding="utf-8")
    start = text.index("  session main ")
    end = text.index("\n  gates {")
    session = text[start:end]
    sessions = "".join(session.replace("session main ", f"session main{i} ", 1)
                       for i in range(copies))
    return text[:start] + sessions + text[end:]


def misspelt(text: str) -> str:
    """`text` with a session whose keyword is misspelt (`sesion`) before its last `}`."""
    cut = text.rindex("}")
    return text[:cut] + "  sesion extra { user \"hi\"; reply 1 }\n" + text[cut:]


def parse_or_diagnose(text: str, name: str) -> Callable[[], object]:
    """A call that parses `text`: the IR, or the diagnostics of a `WorkloadError`."""
    def run() -> object:
        try:
            return parse(text, name)
        except WorkloadError as exc:
            return exc.diagnostics
    return run


def cpu_times(fn: Callable[[], object], repeat: int) -> list[float]:
    """CPU seconds of `repeat` calls of `fn`, after one untimed call."""
    fn()
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def cases(copies: int) -> list[tuple[str, str]]:
    """(label, text) of every case."""
    out = [(name, f.read_text(encoding="utf-8")) for name, f in bundled_workloads()]
    big = large_workload(copies)
    out.append((f"agent-sim, session x {copies}", big))
    out.append((f"agent-sim, session x {copies}, `sesion` at the end (WL101)", misspelt(big)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--copies", type=int, default=60,
                    help="copies of agent-sim's session in the large workload")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    print(f"{describe_machine(started)} · {args.repeat} parses each after one untimed\n")
    rows = []
    for label, text in cases(args.copies):
        runs = cpu_times(parse_or_diagnose(text, label), args.repeat)
        rows.append({"workload": label, "kb": len(text.encode()) / 1024,
                     "median_ms": statistics.median(runs) * 1e3, "best_ms": min(runs) * 1e3})
    print(table(rows, [("workload", "workload", ""), ("kb", "KB", ".1f"),
                       ("median_ms", "median CPU ms", ".2f"), ("best_ms", "best CPU ms", ".2f")]))
    write_json(args.json, "parse_speed", args, rows, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
