"""What touching fresh memory costs on this machine: maps MB megabytes of anonymous memory, writes
one byte to each 4 KB page, 16 pages (64 KB) at a time, timing each 64 KB, and does it three
times (each map released before the next). In a VM whose host backs guest memory on first use,
the first pass over memory the guest never used is slower than the next ones; the spread of
the 64 KB times (p50, p99, max, and how many took over 1 ms) says whether a page fault can be
what stalls a client for milliseconds (docs/performance.md, "Scale", seventeenth session).

Usage: /work/venv/bin/python bench/first_touch.py [MB]   (default 2048)
"""

from __future__ import annotations

import mmap
import sys
import time

PAGE, GROUP = 4096, 16


def touch_pass(megabytes: int) -> list[float]:
    """Output: the seconds each 64 KB of a new `megabytes` map took to touch, page by page."""
    size = megabytes << 20
    m = mmap.mmap(-1, size)
    clock, times, step = time.perf_counter, [], PAGE * GROUP
    try:
        for off in range(0, size, step):
            t = clock()
            for o in range(off, off + step, PAGE):
                m[o] = 1
            times.append(clock() - t)
    finally:
        m.close()
    return times


def describe(label: str, megabytes: int, times: list[float]) -> str:
    s = sorted(times)
    n = len(s)
    return (f"{label}: {megabytes} MB in {sum(s) * 1000:.0f} ms; a 64 KB p50 "
            f"{s[n // 2] * 1e6:.0f} us, p99 {s[int(n * 0.99)] * 1e6:.0f} us, max "
            f"{s[-1] * 1e3:.2f} ms; over 1 ms: {sum(t > 0.001 for t in s)}")


def main() -> int:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    for label in ("first", "second", "third"):
        print(describe(label, megabytes, touch_pass(megabytes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
