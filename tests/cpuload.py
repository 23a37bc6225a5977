"""A real CPU load on this machine for a test: processes that spin, started and stopped by PID,
placed over a part of a run by watching its records file.

    with cpu_load(2) as pids: ...                    # two spinning processes for the block
    with placed_load(records, "over_finalize", 2): wl_run(..., "--records", str(records))

`placed_load` places the load by what the run has written to its `--records` JSONL: `both` from
the start to the end, `over_finalize` from the start until the first finalize's record is
written, `over_baselines` from then to the end (a record is written once its answer is in, at
the client's next quiet moment: the load then covers the requests around that one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SPIN = ("import os, sys\nparent, i = int(sys.argv[1]), 0\nwhile True:\n    i += 1\n"
        "    if i % 2_000_000 == 0 and os.getppid() != parent:\n        break\n")
"""Spins until stopped, or until the process that started it is gone (an interrupted test or
bench leaves no load behind)."""


def start_load(n: int) -> list[int]:
    """Output: the PIDs of `n` new processes that spin on a CPU each until stopped."""
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
            for _ in range(n)]


def stop_load(pids: list[int]) -> None:
    """Stop the processes `pids` (started by `start_load`), and reap them."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    pids.clear()


@contextmanager
def cpu_load(n: int) -> Iterator[list[int]]:
    pids = start_load(n)
    try:
        yield pids
    finally:
        stop_load(pids)


def finalize_written(records: Path) -> bool:
    """Output: True once the records file holds a finalize's record."""
    try:
        return '"label":"finalize"' in records.read_text(encoding="utf-8").replace(" ", "")
    except OSError:
        return False


@contextmanager
def placed_load(records: Path, where: str, n: int = 2) -> Iterator[None]:
    """A load of `n` spinning processes over a part of the run writing `records` (see the
    module: `both`, `over_finalize`, `over_baselines`), stopped when the block ends at the
    latest."""
    pids: list[int] = [] if where == "over_baselines" else start_load(n)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and not finalize_written(records):
            time.sleep(0.005)
        if done.is_set():
            return
        if where == "over_finalize":
            stop_load(pids)
        elif where == "over_baselines":
            pids.extend(start_load(n))

    watcher = threading.Thread(target=watch, daemon=True)
    if where != "both":
        watcher.start()
    try:
        yield
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        stop_load(pids)
