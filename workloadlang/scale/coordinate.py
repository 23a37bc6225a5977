"""What the shards of one run share: its phase barriers and its one isolation.

Input: the workers' calls (`now` for the driver's clock, `ready` to start, `arrive` at a
barrier, `take`/`give_back` the isolation, `drained`, `watch` for changes), the driver's
(`started`, `all_arrived`, `open`, `gone` for a worker that ended or died). Output: one start
instant for every worker, barriers that open for every worker at once, and an isolation held by
one session of the whole run at a time.

`Coordinator` is plain asyncio state: the driver hosts it in one actor (`ray_run`); tests call
it directly. `SharedIsolation` is a worker's side of the isolation (a `run.isolation.RunWide`):
it mirrors the run-wide state, which it follows with `watch`, and tells the coordinator when
its process has drained.

The start: once every live worker is ready (its text sized, its first requests made), the run
starts `START_MARGIN_S` later on the driver's clock (`now`: the coordinator runs on the
driver's machine), time for the instant to reach every worker.

Barriers: barrier k opens when every live worker has arrived at it (all its requests of phases
up to k are done) and the driver has opened it (it reads the engine's counters after a phase
first). The isolation follows the single-process rule (`run.isolation`) over all workers: a
session takes it in the order asked; once it holds it, every live worker says when it has
nothing in flight (each stops starting requests the moment it sees the isolation claimed), and
the isolated request goes only then. A worker that dies counts as arrived at every barrier and
as drained, and its sessions give the isolation back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

START_MARGIN_S = 0.1
"""From the last worker's being ready to the run's start: the instant's way to every worker."""


@dataclass(frozen=True)
class IsolationState:
    """The run-wide isolation: `version` counts changes, `epoch` counts owners; `owner` the
    session holding it (None: nobody), `queue` the sessions waiting for it, in order."""

    version: int = 0
    epoch: int = 0
    owner: str | None = None
    queue: tuple[str, ...] = ()

    def claimed(self, session: str) -> bool:
        return (self.owner is not None and self.owner != session) or any(
            s != session for s in self.queue)


class Coordinator:
    """The run-wide state of `workers` workers (numbered from 0), see the module."""

    def __init__(self, workers: int, barriers: int, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.live = set(range(workers))
        self.ready_set: set[int] = set()
        self.start_instant: float | None = None
        self.all_ready = asyncio.Event()
        self.arrived: list[set[int]] = [set() for _ in range(barriers)]
        self.all_in = [asyncio.Event() for _ in range(barriers)]
        self.opened = [asyncio.Event() for _ in range(barriers)]
        self.state = IsolationState()
        self.worker_of: dict[str, int] = {}  # session -> the worker that asked for it
        self.pending: set[int] = set()  # workers yet to say they drained for this epoch
        self.granted = asyncio.Event()  # the current owner may go
        self.changed = asyncio.Event()

    # ------------------------------------------------------------ the start

    def now(self) -> float:
        """The driver's clock (the wall clock of the machine the coordinator runs on)."""
        return self.clock()

    async def ready(self, worker: int) -> float:
        """`worker` is ready: returns the run's start instant once every live worker is."""
        self.ready_set.add(worker)
        self._check_ready()
        await self.all_ready.wait()
        assert self.start_instant is not None
        return self.start_instant

    async def started(self) -> float:
        """For the driver: the run's start instant, once every live worker is ready."""
        await self.all_ready.wait()
        assert self.start_instant is not None
        return self.start_instant

    def _check_ready(self) -> None:
        if self.live <= self.ready_set and not self.all_ready.is_set():
            self.start_instant = self.clock() + START_MARGIN_S
            self.all_ready.set()

    # ------------------------------------------------------------ barriers

    async def arrive(self, worker: int, k: int) -> None:
        """`worker` has done everything up to barrier `k`: returns when the barrier opens."""
        self.arrived[k].add(worker)
        self._check(k)
        await self.opened[k].wait()

    async def all_arrived(self, k: int) -> None:
        """For the driver: returns when every live worker has arrived at barrier `k`."""
        await self.all_in[k].wait()

    def open(self, k: int) -> None:
        """For the driver: barrier `k` opens (every worker waiting there goes on)."""
        self.opened[k].set()

    def _check(self, k: int) -> None:
        if self.live <= self.arrived[k]:
            self.all_in[k].set()

    # ------------------------------------------------------------ the isolation

    async def take(self, worker: int, session: str) -> IsolationState:
        """`session` (of `worker`) takes the isolation: returns, with the state, once it holds
        it and every live worker has drained."""
        self.worker_of[session] = worker
        if self.state.owner != session and session not in self.state.queue:
            self._set(queue=self.state.queue + (session,))
            self._promote()
        while not (self.state.owner == session and self.granted.is_set()):
            await self._changed()
        return self.state

    def give_back(self, worker: int, session: str) -> None:
        """`session` is done with the isolation (ignored when it does not hold it)."""
        if self.state.owner == session:
            self._set(owner=None)
            self._promote()

    def drained(self, worker: int, epoch: int) -> None:
        """`worker` has nothing in flight and starts nothing while the owner of `epoch` holds
        the isolation."""
        if epoch == self.state.epoch and self.state.owner is not None:
            self.pending.discard(worker)
            self._grant_if_drained()

    async def watch(self, worker: int, version: int) -> IsolationState:
        """Returns the isolation's state once its version is past `version`."""
        while self.state.version <= version:
            await self._changed()
        return self.state

    def gone(self, worker: int) -> None:
        """For the driver: `worker` died. It counts as arrived everywhere and as drained; its
        sessions no longer hold or wait for the isolation."""
        self.live.discard(worker)
        self._check_ready()
        for k in range(len(self.arrived)):
            self._check(k)
        mine = {s for s, w in self.worker_of.items() if w == worker}
        queue = tuple(s for s in self.state.queue if s not in mine)
        if self.state.owner in mine:
            self._set(owner=None, queue=queue)
        elif queue != self.state.queue:
            self._set(queue=queue)
        self.pending.discard(worker)
        self._promote()
        self._grant_if_drained()

    def _promote(self) -> None:
        if self.state.owner is None and self.state.queue:
            first, rest = self.state.queue[0], self.state.queue[1:]
            self.granted.clear()
            self.pending = set(self.live)
            self._set(owner=first, queue=rest, epoch=self.state.epoch + 1)
            self._grant_if_drained()

    def _grant_if_drained(self) -> None:
        if self.state.owner is not None and not self.pending and not self.granted.is_set():
            self.granted.set()
            self._poke()

    def _set(self, **change: Any) -> None:
        data = {"owner": self.state.owner, "queue": self.state.queue,
                "epoch": self.state.epoch, **change}
        self.state = IsolationState(version=self.state.version + 1, **data)
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def _changed(self) -> None:
        await self.changed.wait()


class Link(Protocol):
    """How a worker reaches the coordinator (an actor's methods under Ray, the object itself in
    tests): the same methods, awaited, less `give_back` and `drained`, which are sent and not
    waited for."""

    def now(self) -> Awaitable[float]: ...

    def ready(self, worker: int) -> Awaitable[float]: ...

    def take(self, worker: int, session: str) -> Awaitable[IsolationState]: ...

    def give_back(self, worker: int, session: str) -> None: ...

    def drained(self, worker: int, epoch: int) -> None: ...

    def watch(self, worker: int, version: int) -> Awaitable[IsolationState]: ...

    def arrive(self, worker: int, k: int) -> Awaitable[None]: ...


class SharedIsolation:
    """A worker's side of the run-wide isolation (`run.isolation.RunWide`): `start()` follows
    the coordinator's state, `stop()` ends that."""

    def __init__(self, link: Link, worker: int):
        self.link, self.worker = link, worker
        self.state = IsolationState()
        self.isolation: Any = None  # the worker's `run.isolation.Isolation` (`attach`)
        self.confirmed = 0  # the last epoch this worker said it drained for
        self.held = 0  # the last epoch a session of this worker was granted the isolation
        self.task: asyncio.Future | None = None

    def attach(self, isolation: Any) -> None:
        self.isolation = isolation

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._follow())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def claimed(self, session: str) -> bool:
        return self.state.claimed(session)

    async def take(self, session: str) -> None:
        if self.state.owner == session and self.held == self.state.epoch:
            return  # an isolated block goes on: held, and the run drained, already
        state = await self.link.take(self.worker, session)
        self.held = state.epoch
        self._apply(state)

    def give_back(self, session: str) -> None:
        self.held = 0
        if self.state.owner == session:
            self.state = IsolationState(version=self.state.version, epoch=self.state.epoch,
                                        queue=self.state.queue)
        self.link.give_back(self.worker, session)

    async def _follow(self) -> None:
        while True:
            self._apply(await self.link.watch(self.worker, self.state.version))

    def _apply(self, state: IsolationState) -> None:
        if state.version <= self.state.version:
            return
        self.state = state
        if self.isolation is not None:
            self.isolation.poke()
        if state.owner is not None and state.epoch > self.confirmed:
            self.confirmed = state.epoch
            asyncio.ensure_future(self._confirm(state.epoch))

    async def _confirm(self, epoch: int) -> None:
        if self.isolation is not None:
            await self.isolation.idle()
        self.link.drained(self.worker, epoch)

