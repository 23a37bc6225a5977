"""How the suite shares the machine under pytest-xdist (`-n 2` in pyproject's addopts).

Most of the suite waits on sockets and timers more than it computes, so two workers run it. Each
test is of one of three kinds, and two tests run side by side only when their kinds allow it:

- shared (unmarked): beside another shared test.
- `paired`: reads time, but is light on the CPU (a run against the embedded simulator spends
  about a third of one CPU; the rest of its time the simulator sleeps through prefills). It runs
  beside another `paired` test, never beside a shared one, which may take a whole CPU.
- `alone`: measures time and owns the CPU (llama-server's prefill, a CPU load the test places,
  several simulators at once) or times to a fraction of a millisecond: it runs with no other test
  of the suite in flight. Every `llama` test is `alone`. (A local Ray cluster owns the CPU but
  reads no time: its tests are shared.)

Each test file runs on one worker (`--dist loadfile`), so a module's fixtures are made once.

The order: the shared files first, then the files whose most demanding test is `paired`, then
those with an `alone` test; within each part the files with a `slow` test first (a long file
begun last keeps the other worker idle at the next part's first test), then those with the most
tests (pyproject's `--no-loadscope-reorder` keeps this order for xdist). A test that must wait
idles the other worker, so the kinds run in blocks rather than mixed.

The locks: each kind but `alone` has a lock its tests hold shared from setup to teardown. A test
takes `gate.lock` first, then the other kind's lock exclusively (it waits until no test of that
kind is in flight) and lets it go, then its own shared, then lets the gate go. An `alone` test
takes both kinds' locks exclusively and keeps the gate until its teardown. While a test waits it
holds the gate, so nothing new starts meanwhile. The files sit in the directory that all
workers' temp dirs share. Without xdist (`-n 0`) nothing is held.

conftest.py imports these hooks; a pytest run elsewhere loads them with `-p scheduling`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

ALONE, PAIRED = "alone", "paired"
_FILES: dict[str, IO[bytes]] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Register the `alone` and `paired` markers."""
    config.addinivalue_line(
        "markers", f"{ALONE}: measures time or owns the CPU; runs with no other test in flight")
    config.addinivalue_line(
        "markers", f"{PAIRED}: reads time, light on the CPU; runs beside a `paired` test at most")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Input: the collected tests. Output: every `llama` test marked `alone`, and the files put
    in the suite's order (`in_suite_order`)."""
    for item in items:
        if item.get_closest_marker("llama"):
            item.add_marker(ALONE)
    items[:] = in_suite_order(items)


def in_suite_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Input: tests in collection order. Output: the same tests, each file's together and in
    its own order; the shared files first, then those whose most demanding test is `paired`, then
    those with an `alone` test; in each part the files with a `slow` test first, then by number
    of tests, most first (ties in collection order)."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def key(tests: list[pytest.Item]) -> tuple[int, bool, int]:
        return (max(KINDS.index(kind(t)) for t in tests),
                not any(t.get_closest_marker("slow") for t in tests), -len(tests))

    return [item for tests in sorted(files.values(), key=key) for item in tests]


KINDS = ("shared", PAIRED, ALONE)  # from the least demanding to the most


def kind(item: pytest.Item) -> str:
    """Input: a test. Output: its kind, one of `KINDS` (`alone` wins over `paired`)."""
    for name in (ALONE, PAIRED):
        if item.get_closest_marker(name):
            return name
    return "shared"


def _lock(config: pytest.Config, name: str) -> IO[bytes]:
    """Input: a lock's name. Output: this worker's open handle on its file, in the parent of the
    worker's base temp dir (xdist gives each worker its own dir under one shared one)."""
    if name not in _FILES:
        shared = Path(config.getoption("basetemp")).parent
        _FILES[name] = open(shared / f"wl-suite-{name}.lock", "a+b")
    return _FILES[name]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Run one test (setup, call, teardown) once no test of a kind it may not run beside is in
    flight, holding its kind's lock shared (both kinds' exclusively, and the gate, when it is
    `alone`). In a run without xdist workers, hold nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    gate = _lock(item.config, "gate")
    locks = {k: _lock(item.config, k) for k in KINDS[:2]}
    mine = kind(item)
    fcntl.flock(gate, fcntl.LOCK_EX)
    for other, lock in locks.items():
        if other != mine:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if mine != ALONE:
                fcntl.flock(lock, fcntl.LOCK_UN)
    if mine != ALONE:
        fcntl.flock(locks[mine], fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        for lock in locks.values():
            fcntl.flock(lock, fcntl.LOCK_UN)
        if mine == ALONE:
            fcntl.flock(gate, fcntl.LOCK_UN)
