"""One clock for a run spread over processes and machines: every time on the driver's clock.

Input: a way to ask the driver's clock for its time (`ask`), the worker's own clocks. Output:
the worker's `Offset` to the driver, the run's common start instant on the worker's monotonic
clock (`local_instant`: the worker's run counts its times from it, so a record's `t_start_s` is
already since the common start), and a record's wall-clock times moved onto the driver's clock
(`to_driver`).

The driver's clock is the wall clock (seconds since the epoch) of the machine the driver runs
on; a clock service on that machine answers for it (on one machine every process reads the same
wall clock). A worker asks it `samples` times: with `t1` and `t2` its own wall clock before and
after, and `T` the answer, the offset is `T - (t1 + t2) / 2`, wrong by at most `(t2 - t1) / 2`
(the answer was read somewhere between `t1` and `t2`, whatever the two ways took). The sample
with the shortest round trip counts. Times within a worker are measured on its monotonic clock
(`time.perf_counter`), as in a single process; only instants that cross processes use the
offset: the common start (from the driver) and the records' wall-clock send times (to it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

SAMPLES = 8

WALL_FIELDS = ("t_send_unix",)
"""Record fields on the wall clock: `offset_s` is added."""


@dataclass(frozen=True)
class Offset:
    """The driver's clock minus the worker's (seconds), wrong by at most `error_s`, from the
    best of `samples` round trips."""

    offset_s: float
    error_s: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {"clock_offset_s": round(self.offset_s, 6),
                "clock_offset_error_s": round(self.error_s, 6),
                "clock_samples": self.samples}


async def measure(ask: Callable[[], Awaitable[float]], wall: Callable[[], float] = time.time,
                  samples: int = SAMPLES) -> Offset:
    """Input: `ask()` gives the driver's wall clock now; `wall` is this worker's. Output: the
    offset from the sample with the shortest round trip."""
    if samples < 1:
        raise ValueError("at least one sample")
    best: tuple[float, float] | None = None  # (round trip, offset)
    for _ in range(samples):
        t1 = wall()
        theirs = await ask()
        t2 = wall()
        trip = max(0.0, t2 - t1)
        if best is None or trip < best[0]:
            best = (trip, theirs - (t1 + t2) / 2)
    assert best is not None
    return Offset(offset_s=best[1], error_s=best[0] / 2, samples=samples)


def local_instant(driver_instant: float, offset: Offset, wall: Callable[[], float] = time.time,
                  mono: Callable[[], float] = time.perf_counter) -> float:
    """Input: an instant on the driver's clock. Output: the same instant on this worker's
    monotonic clock (`mono`)."""
    return mono() + (driver_instant - offset.offset_s - wall())


def to_driver(record: dict[str, Any], offset: Offset) -> dict[str, Any]:
    """Input: a record's JSON form as the worker measured it. Output: the same record with its
    wall-clock times on the driver's clock (the dict is changed in place and returned)."""
    for name in WALL_FIELDS:
        if record.get(name) is not None:
            record[name] = record[name] + offset.offset_s
    return record
