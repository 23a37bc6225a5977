"""How the suite shares the machine under pytest-xdist (`-n 2` in pyproject's addopts).

Most of the suite waits on sockets and timers more than it computes, so two workers run it. A
test marked `alone` measures time or owns the CPU (a verdict read from timings, llama-server's
prefill, a local Ray cluster): it runs with no other test of the suite in flight. Every `llama`
test is `alone`. Each test file runs on one worker (`--dist loadfile`), so a module's fixtures
are made once.

The order: the files with no `alone` test first, the files with the most tests first among them,
then the files that hold an `alone` test (pyproject's `--no-loadscope-reorder` keeps this order
for xdist). While an `alone` test waits or runs the other worker idles, so each `alone` test
costs its time twice over if the other worker is busy with shared tests; run last, the `alone`
tests follow each other and the shared ones have already run side by side.

The lock: each test, from its setup to its teardown, holds `share.lock` shared, an `alone` test
holds it exclusively. Both take `gate.lock` first (a test that is not `alone` lets it go at once),
so an `alone` test that waits keeps new tests from starting while it waits. The files sit in the
directory that all workers' temp dirs share. Without xdist (`-n 0`) nothing is held.

conftest.py imports these hooks; a pytest run elsewhere loads them with `-p scheduling`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

ALONE = "alone"
_FILES: dict[str, IO[bytes]] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Register the `alone` marker."""
    config.addinivalue_line(
        "markers", f"{ALONE}: measures time or owns the CPU; runs with no other test in flight")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Input: the collected tests. Output: every `llama` test marked `alone`, and the files put
    in the suite's order (`in_suite_order`)."""
    for item in items:
        if item.get_closest_marker("llama"):
            item.add_marker(ALONE)
    items[:] = in_suite_order(items)


def in_suite_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Input: tests in collection order. Output: the same tests, each file's together and in
    its own order; the files without an `alone` test first, then those with one, each part by
    number of tests, most first (ties in collection order)."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def key(tests: list[pytest.Item]) -> tuple[bool, int]:
        return any(t.get_closest_marker(ALONE) for t in tests), -len(tests)

    return [item for tests in sorted(files.values(), key=key) for item in tests]


def _lock(config: pytest.Config, name: str) -> IO[bytes]:
    """Input: a lock's name. Output: this worker's open handle on its file, in the parent of the
    worker's base temp dir (xdist gives each worker its own dir under one shared one)."""
    if name not in _FILES:
        shared = Path(config.getoption("basetemp")).parent
        _FILES[name] = open(shared / f"wl-suite-{name}.lock", "a+b")
    return _FILES[name]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Run one test (setup, call, teardown) holding the suite's lock: exclusively when it is
    `alone`, else shared. In a run without xdist workers, hold nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    gate, share = _lock(item.config, "gate"), _lock(item.config, "share")
    alone = item.get_closest_marker(ALONE) is not None
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(share, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    if not alone:
        fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(share, fcntl.LOCK_UN)
        if alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
