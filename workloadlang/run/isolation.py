"""Isolated requests: a request marked `isolated` is timed alone.

Input: the planned requests as the executor reaches them (`enter`, `leave`), whether anything of
the run is still in flight or queued for a slot (`busy`, the executor's), a clock, and what to
call when an isolated stretch begins and ends (`on_alone`: the transport reads its one stream
at normal priority then).
Output: the moment each request may go on, and what isolation cost: per request how long it
waited for the run's requests in flight to end (`waited`) or was held back by another
session's isolation (`held`), and the run's total time with an isolation in force (`summary`).

The rule: an isolated request takes the run's one isolation (sessions take it in the order they
ask), then waits until nothing else of the run is in flight or waiting for a slot; from then
until its session gives the isolation back no other session starts a request. A session keeps
the isolation while its requests are isolated, so an isolated block runs as one undisturbed
stretch, and gives it back before its first request that is not (`leave`), or at its end. A
request that is not isolated waits while another session holds the isolation or waits for it.
So an isolated request's TTFT holds no other request's work of the run, and nothing of the run
changes the engine's cache from its send to its end.

A run sharded over several processes (`workloadlang.scale`) has one isolation for all of them:
`shared` (a `RunWide`) says when a session of another process holds it or waits for it, and an
isolated request takes it run-wide too, which waits until no process has anything in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from workloadlang.plan.model import PRequest


class RunWide(Protocol):
    """The isolation across the processes of a sharded run, as one process sees it."""

    def attach(self, isolation: Isolation) -> None:
        """Called once by the process's `Isolation`: poke it when the run-wide state changes,
        wait for it to be `idle` before telling the others this process has drained."""

    def claimed(self, session: str) -> bool:
        """True when a session other than `session` (of any process) holds it or waits."""

    async def take(self, session: str) -> None:
        """Hold it run-wide; returns once no process has a request of the run in flight."""

    def give_back(self, session: str) -> None:
        """`session` is done with it."""


class Isolation:
    """The run's isolation: at most one session holds it at a time (see the module)."""

    def __init__(self, busy: Callable[[], bool], clock: Callable[[], float],
                 on_alone: Callable[[bool], Any] = lambda on: None,
                 shared: RunWide | None = None):
        self.busy, self.clock, self.on_alone, self.shared = busy, clock, on_alone, shared
        self.owner: str | None = None  # the session holding the isolation
        self.queue: deque[tuple[str, asyncio.Future[None]]] = deque()  # sessions asking for it
        self.changed: asyncio.Event | None = None  # set when something may have ended
        self.since = 0.0  # when the current owner took it
        self.active_s = 0.0  # total time an isolation was held, ended ones
        self.waited: dict[str, float] = {}  # request id -> its wait for the run to drain
        self.held: dict[str, float] = {}  # request id -> time held back by others' isolation
        self.first: dict[str, str] = {}  # session -> the first request of its stretch alone
        self.count = 0  # isolated requests sent
        if shared is not None:
            shared.attach(self)

    def claimed(self, session: str) -> bool:
        """Output: True when another session holds the isolation or waits for it: a request of
        `session` that is not isolated must not start now (nor be written ahead)."""
        return (self.owner is not None and self.owner != session) or any(
            s != session for s, _ in self.queue) or (
            self.shared is not None and self.shared.claimed(session))

    async def enter(self, req: PRequest) -> float:
        """Wait until `req` may be sent. Output: seconds waited (the isolation's cost here)."""
        if not req.isolated and not self.claimed(req.session):
            return 0.0
        t0 = self.clock()
        if req.isolated:
            if self.owner != req.session:  # a new stretch timed alone begins with it
                self.first[req.session] = req.id
            await self._take(req.session)
            if self.shared is not None:
                await self.shared.take(req.session)
            await self._drained()
            self.waited[req.id] = self.clock() - t0
            self.count += 1
        else:
            while self.claimed(req.session):
                await self._poke_wait()
            self.held[req.id] = self.clock() - t0
        return self.clock() - t0

    def leave(self, session: str, after: PRequest | None) -> None:
        """`session` is done with its request; `after` is its next one (None: it has no more).
        Gives the isolation back unless `after` is isolated too."""
        if self.owner == session and (after is None or not after.isolated):
            self.active_s += self.clock() - self.since
            self.owner = None
            self.on_alone(False)
            if self.shared is not None:
                self.shared.give_back(session)
            self._next_owner()
            self.poke()

    def poke(self) -> None:
        """Something may have ended or been given back: waiters look again."""
        if self.changed is not None:
            self.changed.set()

    def summary(self) -> dict[str, Any]:
        """Output: the results' `client` fields of the isolation's cost: isolated requests
        sent, the seconds they waited for the run to drain, the seconds other requests were
        held back, and the time an isolation was in force (the run went one request at a
        time)."""
        active = self.active_s + (self.clock() - self.since if self.owner is not None else 0.0)
        return {"isolated_requests": self.count,
                "isolation_wait_s": round(sum(self.waited.values()), 6),
                "isolation_held_s": round(sum(self.held.values()), 6),
                "isolation_active_s": round(active, 6)}

    async def _take(self, session: str) -> None:
        if self.owner == session:
            return
        if self.owner is None and not self.queue:
            self._own(session)
            return
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((session, fut))
        self.poke()  # requests not isolated now see it claimed
        await fut

    def _own(self, session: str) -> None:
        self.owner, self.since = session, self.clock()

    def _next_owner(self) -> None:
        while self.queue and self.owner is None:
            session, fut = self.queue.popleft()
            if not fut.done():
                self._own(session)
                fut.set_result(None)

    async def idle(self) -> None:
        """Wait until nothing of this process's run is in flight or waiting for a slot."""
        while self.busy():
            await self._poke_wait()

    async def _drained(self) -> None:
        await self.idle()
        self.on_alone(True)

    async def _poke_wait(self) -> None:
        if self.changed is None:
            self.changed = asyncio.Event()
        self.changed.clear()
        await self.changed.wait()
