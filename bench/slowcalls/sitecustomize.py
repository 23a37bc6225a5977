"""Bench diagnostic, loaded by `wl run` only when this directory is on its PYTHONPATH
(`bench/scale.py --slow-calls MS` does that for the client process, not the simulator's).

Records what took longer than `WL_SLOWCALLS_MS` milliseconds on the client's event loop:
every loop callback (a task's step named by its coroutine, a callback by its name; the
transport's `_deliver_all` with its batch size), the executor's steps inside them (`_chain`,
`_write_bytes`, `_make_wire`, `_build_early`, `_wire`, `_record`, `_flush`, with the request
id) and the garbage collector's passes (generation, objects collected). At exit it writes one
JSON line per entry to the file `WL_SLOWCALLS` names: {"at": unix start, "ms": duration,
"what": ...}. Costs three clock reads a callback; nothing of it is in `wl run` itself. A
client killed before its exit leaves no file."""

from __future__ import annotations

import asyncio.events
import atexit
import gc
import json
import os
import sys
import time

_OUT = os.environ.get("WL_SLOWCALLS")
_LIMIT = float(os.environ.get("WL_SLOWCALLS_MS", "3")) / 1000
_STEPS = ("_chain", "_write_bytes", "_make_wire", "_build_early", "_wire", "_record", "_flush")
_slow: list[tuple[float, float, str]] = []  # (unix start, seconds, what)
_patched = False


def _name(handle: asyncio.events.Handle, cb) -> str:
    """Output: what a loop callback runs (`cb`, taken before it ran: a reader's callback that
    stops reading cancels its own handle): a task's coroutine, else the callback's name."""
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return "task " + getattr(owner.get_coro(), "__qualname__", "?")
    name = getattr(cb, "__qualname__", None) or type(cb).__name__
    if name == "_deliver_all" and handle._args:  # noqa: SLF001
        return f"_deliver_all ({len(handle._args[0])} reads)"  # noqa: SLF001
    return name


def _timed(cls: type, method: str) -> None:
    """Wrap `cls.method` to record its calls longer than the limit, with the request's id."""
    inner = getattr(cls, method)

    def timed(self, *args, **kwargs):
        t, at = time.perf_counter(), time.time()
        try:
            return inner(self, *args, **kwargs)
        finally:
            took = time.perf_counter() - t
            if took > _LIMIT:
                rid = getattr(args[0], "id", "") if args else ""
                _slow.append((at, took, f"  {method} {rid}".rstrip()))

    setattr(cls, method, timed)


def _patch_executor() -> None:
    """Once the executor is imported (it is by the first loop callback): time its steps."""
    global _patched
    executor = sys.modules.get("workloadlang.run.executor")
    if executor is None or not hasattr(executor, "Executor"):
        return
    _patched = True
    for method in _STEPS:
        if hasattr(executor.Executor, method):  # a step renamed or gone is not timed
            _timed(executor.Executor, method)


_run = asyncio.events.Handle._run  # noqa: SLF001


def _timed_run(self: asyncio.events.Handle) -> None:
    if not _patched:
        _patch_executor()
    cb, t, at = self._callback, time.perf_counter(), time.time()  # noqa: SLF001
    _run(self)
    took = time.perf_counter() - t
    if took > _LIMIT:
        _slow.append((at, took, _name(self, cb)))


_gc_began = [0.0, 0.0]


def _gc_pass(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_began[:] = [time.perf_counter(), time.time()]
        return
    took = time.perf_counter() - _gc_began[0]
    if took > _LIMIT:
        _slow.append((_gc_began[1], took,
                      f"  gc generation {info['generation']}, {info['collected']} collected"))


def _write() -> None:
    with open(_OUT, "w") as f:
        for at, took, what in _slow:
            f.write(json.dumps({"at": at, "ms": round(took * 1000, 3), "what": what}) + "\n")


if _OUT:
    asyncio.events.Handle._run = _timed_run  # noqa: SLF001
    gc.callbacks.append(_gc_pass)
    atexit.register(_write)
