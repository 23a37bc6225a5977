"""When a session's request is due, beyond its dependencies and its phase.

Input: the plan's sessions (`SessionInfo.start_s`: a copy's planned start, an arrival;
`SessionInfo.cap`: its session's `concurrency`), the requests of a run, the outcomes so far.
Output:
- a request's planned wait (`planned_wait`): `wait D` before it (`PRequest.wait_before`) and,
  for `wait reading RATE`, the time to read the session's previous answer: its generated tokens
  at the planned seconds per token (`PRequest.wait_per_token`), known once that answer is in;
- the copies of a session (`Copies`): which first requests are made before the clock (those due
  at the start, and every arrival's first: all of them wait from the start, and made then they
  would delay the first arrivals; a trace request is made while it waits for its time); with
  a `concurrency` cap, a copy waits for its arrival (`sleep_until`: the executor's, never past
  the run's time budget), then for a place among its session's copies running at once, and
  gives it back after its last request. The wait for a place is part of
  the first request's schedule lag (`Record.schedule_lag_s`: sent minus planned), not the
  client's delay.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from workloadlang.plan.model import PRequest, SessionInfo


def planned_wait(req: PRequest, outcomes: Mapping[str, Any]) -> float:
    """Output: seconds `req` waits after its dependencies are done: its planned wait plus the
    reading time of the answer it follows (`reading_time`)."""
    return req.wait_before + reading_time(req, outcomes)


def reading_time(req: PRequest, outcomes: Mapping[str, Any]) -> float:
    """Output: the time to read the session's previous answer (`wait reading`): its generated
    tokens (as reported, else as streamed) times the planned seconds per token; 0 without
    `reading` or without that answer."""
    if not req.wait_per_token or not req.deps:
        return 0.0
    prev = outcomes.get(req.deps[0])
    if prev is None:
        return 0.0
    tokens = prev.completion_tokens if prev.completion_tokens is not None else \
        prev.streamed_tokens
    return req.wait_per_token * max(0, tokens or 0)


class Copies:
    """The copies of the plan's sessions in one run (see the module). `clock`: the executor's."""

    def __init__(self, sessions: Iterable[SessionInfo], requests: Sequence[PRequest],
                 clock: Callable[[], float],
                 sleep_until: Callable[[float], Awaitable[None]] | None = None) -> None:
        self.clock = clock
        self.sleep_until = sleep_until or self._sleep_until
        caps: dict[str, asyncio.Semaphore] = {}
        self.cap: dict[str, asyncio.Semaphore] = {}  # a capped copy -> its session's places
        self.start: dict[str, float] = {}  # an arriving copy -> its planned start
        for s in sessions:
            if s.start_s is not None:
                self.start[s.id] = s.start_s
            if s.cap:
                self.cap[s.id] = caps.setdefault(s.name, asyncio.Semaphore(s.cap))
        self.left = Counter(r.session for r in requests if r.session in self.cap)
        self.first: dict[str, str] = {}  # a capped copy -> its first request
        for r in requests:
            if r.session in self.cap:
                self.first.setdefault(r.session, r.id)
        self.placed: set[str] = set()  # capped copies holding a place

    def early(self, firsts: Iterable[PRequest]) -> list[PRequest]:
        """Output: of the sessions' first requests, those to make before the clock: due at the
        start (no planned send time) or an arrival's first."""
        return [r for r in firsts if r.send_at is None or r.session in self.start]

    def free(self, startable: Iterable[PRequest]) -> list[PRequest]:
        """Output: of the requests the start could write at once, those of copies without a
        cap (a capped copy takes its place first)."""
        return [r for r in startable if r.session not in self.cap]

    async def place(self, req: PRequest, ready: float, t0: float) -> float:
        """For a capped copy's first request: wait for the copy's arrival (`t0` + its planned
        start), then for a place among its session's copies running at once. Output: when the
        request may go on: `ready`, or the moment the copy took its place if later."""
        places = self.cap.get(req.session)
        if places is None or self.first[req.session] != req.id:
            return ready
        start = self.start.get(req.session)
        if start:
            await self.sleep_until(t0 + start)
        await places.acquire()
        self.placed.add(req.session)
        return max(ready, self.clock())

    async def _sleep_until(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - self.clock()))

    def done(self, req: PRequest) -> None:
        """`req` is done (answered or skipped): after its copy's last request, the copy gives
        its place back (a copy waiting for one may go)."""
        if req.session not in self.cap:
            return
        self.left[req.session] -= 1
        if not self.left[req.session] and req.session in self.placed:
            self.placed.discard(req.session)
            self.cap[req.session].release()
