"""Phase barriers: a request of a phase goes once every request of the phases before it is done.

Input: the requests of a run in plan order (a session's requests never go back to an earlier
phase), the plan's phase names, the clock, and what to do as a barrier opens (`on_open`: the
runner reads the engine's counters "after" each phase). Output: each request's phase index
(`index`; a request without a phase keeps its session's current one), a wait for a phase to
open (`wait`, giving when it opened), and the count of what is done (`done`).

Barrier k (k = 0 .. number of phases) opens when every request of index <= k is done (sent and
answered, or skipped); a request of index k waits for barrier k - 1. The last barrier opens
when everything is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from workloadlang.plan.model import PRequest


class Phases:
    """The barriers of one run (see the module)."""

    def __init__(self, requests: Iterable[PRequest], phases: Sequence[str],
                 clock: Callable[[], float],
                 on_open: Callable[[int], Awaitable[Any]] | None = None) -> None:
        self.clock, self.on_open, self.n = clock, on_open, len(phases)
        position = {name: i + 1 for i, name in enumerate(phases)}
        self.index: dict[str, int] = {}
        self.left = [0] * (self.n + 1)  # requests not done yet, by phase index
        current: dict[str, int] = {}
        for r in requests:
            k = position[r.phase] if r.phase else current.get(r.session, 0)
            current[r.session] = k
            self.index[r.id] = k
            self.left[k] += 1
        self.opened_at: list[float | None] = [None] * (self.n + 1)
        self.events = [asyncio.Event() for _ in range(self.n + 1)]
        self.next = 0  # the lowest barrier not opened yet
        self.opening = False

    def is_open(self, k: int) -> bool:
        """Output: True when a request of phase index `k` may go."""
        return k == 0 or self.events[k - 1].is_set()

    async def wait(self, k: int) -> float:
        """Wait until a request of phase index `k` may go. Output: when its barrier opened."""
        if k == 0:
            return 0.0
        await self.events[k - 1].wait()
        return self.opened_at[k - 1] or 0.0

    async def start(self) -> None:
        """Open the barriers that nothing holds (phases without requests before the first)."""
        await self._open_ready()

    async def done(self, req: PRequest) -> None:
        """`req` is done: open every barrier that now holds nothing (`on_open` is awaited for
        each, in order, by the caller that opens it)."""
        self.left[self.index[req.id]] -= 1
        await self._open_ready()

    async def _open_ready(self) -> None:
        if self.opening:  # another caller is opening barriers: it opens this one too
            return
        self.opening = True
        try:
            while self.next <= self.n and self.left[self.next] == 0:
                k = self.next
                if self.on_open is not None:
                    await self.on_open(k)
                self.opened_at[k] = self.clock()
                self.events[k].set()
                self.next += 1
        finally:
            self.opening = False
