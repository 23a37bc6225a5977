"""How long other requests of the run were in flight while one waited for its first token.

An engine that reports no prefill time of its own (vLLM, SGLang) leaves the client's TTFT as
the only measure of a prefill, and that TTFT holds whatever time the engine spent on other
requests first: queueing for a slot, sharing a batch. A verdict that says "this prefill took
too long for a cache hit" (`ttft_agrees`, a miss judged by the TTFT threshold, a speed gate)
must not be drawn from that time. `Slots` is the run's concurrency limit that also keeps a
timeline of how many requests hold a slot (a request holds one from just before it is written
until its answer has been read); `Slots.overlap` gives, for one request's window from its send
to its first token, the time in which another request held one: the time the engine may have
spent on them. Requests from outside the run are not seen.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Callable
from typing import Literal


class Slots(asyncio.Semaphore):
    """The concurrency limit (an `asyncio.Semaphore` of `value` slots) with a timeline:
    `times[i]` (on `clock`) the moment the number of slots held became `counts[i]`."""

    def __init__(self, value: int, clock: Callable[[], float]):
        super().__init__(value)
        self.clock = clock
        self.held = 0
        self.times: list[float] = []
        self.counts: list[int] = []
        self.reserved = 0

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        self._changed(1)
        return True

    async def reserve(self, n: int) -> int:
        """Take up to `n` free slots now, without waiting, for requests about to be written
        (the run's start, before its clock): they are held from `take_reserved` on, one at a
        time; `unreserve` gives back the ones not taken. Output: how many were reserved."""
        while self.reserved < n and not self.locked():
            await super().acquire()  # free: does not suspend
            self.reserved += 1
        return self.reserved

    def take_reserved(self) -> None:
        """A request is written on a reserved slot: it holds the slot from now on."""
        self.reserved -= 1
        self._changed(1)

    def unreserve(self) -> None:
        """Give back the reserved slots no request took."""
        while self.reserved:
            self.reserved -= 1
            super().release()

    def release(self) -> None:
        super().release()
        self._changed(-1)

    def _changed(self, step: int) -> None:
        self.held += step
        self.times.append(self.clock())
        self.counts.append(self.held)

    def overlap(self, start: float, end: float) -> float:
        """Input: a window [start, end] on `clock` of a request that held a slot throughout.
        Output: the seconds of it in which at least one other request held a slot too."""
        times, counts = self.times, self.counts
        i = bisect_right(times, start) - 1
        held = counts[i] if i >= 0 else 0
        t, total = start, 0.0
        for j in range(i + 1, len(times)):
            if times[j] >= end:
                break
            if held >= 2:
                total += times[j] - t
            t, held = times[j], counts[j]
        if held >= 2:
            total += end - t
        return total
