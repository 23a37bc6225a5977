"""Fuzz the frontend at scale: the properties of tests/test_fuzz.py over many more examples.

    python bench/fuzz.py [N]        # N examples in all (default 10000)

Input: none (the bundled workloads and the grammar's keywords). Output: the number of examples
run and the wall time, printed; exit status 1 if any example broke the property (Hypothesis
prints the smallest failing text).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import given, settings  # noqa: E402

import test_fuzz  # noqa: E402  (the strategies and the property live with the tests)


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


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
