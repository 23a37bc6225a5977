"""The executor: runs a `Plan` (or a shard of its sessions) and gives one `Record` per request.

Input: a `Plan`, a `Realiser` (text sized for this engine), a `Pacing` (how bytes leave:
`pacing.InTurn`, or the latency machinery of `ahead.WriteAhead`), the `Endpoint`, a `Sink` that
gets every record the moment it is kept, and injected clocks (and `sleep`, which waits on
`clock`). `sessions` runs a shard of the plan (a session never splits); `start_at` (on
`clock`) is the instant the run starts. `shared`: what a shard of a run sharded over processes
shares with the others (`Shared`: the start, the isolation, what it sends;
`workloadlang.scale`). `on_phase(k)` is awaited as barrier k opens (k >= 1: the end of phase
k - 1).
Output: a `RunResult` (records in plan order, why the run is incomplete, the client's health).

The plan's semantics, all here:
- a request goes when its dependencies are done (`PRequest.deps`: a session's previous request,
  the conversation's last), its phase is open (every request of the phases before it is done:
  `phases.Phases`), and its planned wait (from its dependencies' end, with the time to read the
  previous answer: `schedule.planned_wait`) or planned send time (from the run's start: a trace
  request, an arrival's first) has come; a request with several ready dependents starts each on
  its own; a copy of a session with a `concurrency` cap takes its place first
  (`schedule.Copies`);
- the workload's concurrency limit is a semaphore around the send (`contention.Slots`, which
  keeps who was in flight when); `isolated` requests are timed alone (`isolation.Isolation`);
- `until` loops, fail-fast, resends of failed requests, errors in a row and the time budget
  stop what would follow (`stops.Stops`; no wait outlasts the budget: `Stops.sleep_until`); by
  default every session runs to its end so every verdict can be judged.
Every request's fillers are sized before the clock starts (`RequestMaker.size_all`: by
arithmetic once the engine's tokenizer has been checked, `plan.vocab`); its text is made
shortly before it is due (`MAKE_AHEAD_S`), or while it waits for a slot. Records
whose content nothing waits for are kept when the pacing says (`Pacing.later`); one whose record
may decide what is sent next (or an error) is kept at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.realise import Realiser
from workloadlang.results import Record, Sink
from workloadlang.run.client import warm_up
from workloadlang.run.contention import Slots
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.errors import ErrorInfo
from workloadlang.run.health import ClientHealth
from workloadlang.run.isolation import Isolation, RunWide
from workloadlang.run.maker import RequestMaker, by_session
from workloadlang.run.pacing import Pacing
from workloadlang.run.phases import Phases
from workloadlang.run.record import Recorder, TtftReference, skipped_record
from workloadlang.run.remeasure import Remeasure
from workloadlang.run.schedule import Copies, planned_wait
from workloadlang.run.sse import Outcome
from workloadlang.run.stops import Stops
from workloadlang.run.stretch import Stretches

MAKE_AHEAD_S = 1.0
"""A request with a planned send time (a trace's, an arrival's, after a wait) is made this long
before it: a trace of any length is realised as its schedule goes, in bounded memory."""


class Shared(Protocol):
    """What a shard of a run sharded over processes shares with the other shards."""

    @property
    def isolation(self) -> RunWide:
        """The run's one isolation, across the processes."""

    async def start(self) -> float:
        """Wait until every shard is ready. Output: the run's start instant on `clock`."""

    def sent(self, rid: str) -> None:
        """Request `rid` is written to the engine now: a shard lost before its record is
        known leaves it sent, with its outcome unknown (not "not run")."""


@dataclass
class RunResult:
    records: list[Record]
    elapsed_s: float
    incomplete: str | None = None
    client: dict[str, Any] = field(default_factory=dict)


class Executor:
    """One run of one plan (see the module). Use `await Executor(...).run()`."""

    def __init__(self, plan: Plan, realiser: Realiser, pacing: Pacing, endpoint: Endpoint,
                 sink: Sink, *, ref: TtftReference | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 concurrency: int | None = None, time_budget_s: float | None = None,
                 max_consecutive_errors: int = 10, prefill_own: bool = False,
                 on_phase: Callable[[int], Awaitable[Any]] | None = None,
                 on_alone: Callable[[bool], Any] = lambda on: None,
                 sessions: Collection[str] | None = None, start_at: float | None = None,
                 shared: Shared | None = None, measure_again: bool = True,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        self.plan, self.pacing, self.endpoint, self.sink, self.clock = \
            plan, pacing, endpoint, sink, clock
        self.requests = [r for r in plan.requests if sessions is None or r.session in sessions]
        self.by_id = {r.id: r for r in self.requests}
        self.concurrency = concurrency or plan.concurrency
        self.slots = Slots(self.concurrency, clock)
        self.queued = 0  # requests waiting for a concurrency slot
        self.isolation = Isolation(lambda: self.slots.held > 0 or self.queued > 0, clock,
                                   on_alone=on_alone,
                                   shared=shared.isolation if shared is not None else None)
        timing = ref or TtftReference()
        self.again = Remeasure(plan, clock, enabled=measure_again,
                               floors=(timing.floor(server=False), timing.floor(server=True)))
        self.maker = RequestMaker(realiser, endpoint, clock, timeout_s=plan.timeout_s,
                                  time_budget_s=time_budget_s, tries=self.again.tries)
        self.stops = Stops(plan, clock, time_budget_s=time_budget_s,
                           max_errors=max_consecutive_errors, sleep=sleep)
        self.phases = Phases(self.requests, plan.phases, clock, self._phase_opened)
        self.copies = Copies(plan.sessions, self.requests, clock, self.stops.sleep_until)
        self.outcomes: dict[str, Outcome] = {}
        self.recorder = Recorder(plan, self.slots, self.isolation, timing,
                                 prefill_own, realiser.source_of, self.again)
        self.stretches = Stretches(plan, self.again,
                                   lambda r, o: self.recorder.hit(r, o, self.outcomes),
                                   partial(self._send, after=None, within=True),
                                   self.isolation.first, self.outcomes, enabled=measure_again)
        self.health = ClientHealth(clock, cpu_clock)
        self.on_phase, self.start_at, self.shared = on_phase, start_at, shared
        # a shard tells its driver what it writes, before any record of it (`Shared.sent`)
        self.sending: Callable[[str], None] = shared.sent if shared else lambda rid: None
        self.records: dict[str, Record] = {}
        self.cut: dict[str, Outcome] = {}  # in flight when the run was stopped (`fill_unrun`)
        self.holding: set[str] = set()  # written ahead of their turn, each holding a slot
        self.sink_error: Exception | None = None
        self.t0 = 0.0
        self.tasks: list[asyncio.Future[Any]] = []
        self.ready_at: dict[str, float] = {}  # when a request's dependencies were done
        self.waiting = {r.id: sum(d in self.by_id for d in r.deps) for r in self.requests}
        self.dependents, self.successor = links(self.requests)
        pacing.bind(self)

    # ------------------------------------------------------------ the run

    async def run(self) -> RunResult:
        roots = [r for r in self.requests if not self.waiting[r.id]]
        await self.maker.size_all(by_session(self.requests), self.sink)  # before the clock
        startable = self.copies.free(await self.pacing.before_clock(self.copies.early(roots)))
        warm_up()
        self.health.before_clock()
        reserved = await self.slots.reserve(len(startable))
        self.t0 = self.maker.t0 = self.stops.t0 = await started(self.start_at, self.shared,
                                                                 self.clock)
        self.pacing.write_start(startable[:reserved], self._written_at_start)
        self.slots.unreserve()
        self.health.start(self.t0)
        try:
            await self.phases.start()
            for r in roots:
                self._spawn(r, self.t0)
            while pending := [t for t in self.tasks if not t.done()]:
                await asyncio.gather(*pending)
        finally:
            for t in self.tasks:
                t.cancel()
            self.health.stop()
            self.isolation.on_alone(False)  # a run stopped in an isolated stretch
            self.pacing.end()
            for r, o in self.stretches.release_all():  # a run stopped in a stretch
                self._keep(r, o)
            self.pacing.flush()
            self.fill_unrun()
        if self.sink_error is not None:
            raise self.sink_error
        return self.result()

    def result(self, incomplete: str | None = None) -> RunResult:
        """Output: the run's result so far (`incomplete`: why it was stopped from outside)."""
        return RunResult(records=[self.records[r.id] for r in self.requests if r.id in self.records],
                         elapsed_s=self.clock() - self.t0,
                         incomplete=incomplete or self.stops.incomplete(self.records.values()),
                         client=self.health.summary(self.outcomes.values(), {
                             **self.isolation.summary(), **self.again.summary(),
                             **self.stretches.summary()}))

    def _spawn(self, req: PRequest, ready: float) -> None:
        self.ready_at[req.id] = ready
        self.tasks.append(asyncio.ensure_future(self._walk(req)))

    async def _walk(self, req: PRequest | None) -> None:
        """Send `req`, then go on with the first dependent this made ready (others start apart)."""
        while req is not None:
            end = await self._one(req)
            ready = []
            for d in self.dependents[req.id]:
                self.waiting[d.id] -= 1
                self.ready_at[d.id] = max(self.ready_at.get(d.id, end), end)
                if not self.waiting[d.id]:
                    ready.append(d)
            await self.phases.done(req)
            self.copies.done(req)
            for other in ready[1:]:
                self._spawn(other, self.ready_at[other.id])
            req = ready[0] if ready else None

    async def _one(self, req: PRequest) -> float:
        """Send `req` once it is due, or record why not. Output: when its dependents may go."""
        if self.sink_error is not None:
            raise self.sink_error
        ready, k = self.ready_at.pop(req.id, self.t0), self.phases.index[req.id]
        if not self.phases.is_open(k):
            self.pacing.prepare(req)  # made while the others finish
        opened = await self.phases.wait(k)  # also when this walker opened it
        ready = await self.copies.place(req, max(ready, opened), self.t0)  # a capped copy's place
        after = self.successor.get(req.id)
        due = due_at(req, ready, opened - self.t0, self.t0, self.outcomes,
                     self.recorder.planned_at)
        reason = None if req.id in self.holding else self.stops.reason(req, self.records, due)
        if reason:
            return max(ready, self._skip(req, reason, after))
        if after is not None:  # at a quiet moment while this one is in flight
            self.pacing.ahead(after)
        if due > self.clock():  # the planned wait or send time: made shortly before it
            await self.stops.sleep_until(due - MAKE_AHEAD_S)  # not made, nor held, till then
            self.pacing.prepare(req)
            await self.stops.sleep_until(due)
        sent = await self._send(req, after)
        if isinstance(sent, str):  # a stop came while it waited (the budget ran out, ...)
            return self._skip(req, sent, after)
        first, waited = sent
        outcome = await self.again.settle(req, first, self.outcomes, self.isolation.first,
                                          partial(self._send, req, None))
        self.health.sent(due, first.t_send, waited, self.recorder.planned_at.get(req.id))
        self.outcomes[req.id] = outcome
        next_alone = _same_phase(self.phases, req, after)
        held, kept = await self.stretches.answered(  # a stretch measured again, `run.stretch`
            req, outcome, next_alone is None or not next_alone.isolated, self.stops.decides(req))
        for r, o in kept:
            self.pacing.later(partial(self._keep, r, o))
        if not held and (outcome.error is not None or self.stops.decides(req)):
            self.pacing.flush()  # the records of earlier answers first: stops and sink in order
            self._keep(req, outcome)
        elif not held:
            self.pacing.later(partial(self._keep, req, outcome))
        self.isolation.leave(req.session, next_alone)
        return self.outcomes[req.id].t_send + self.outcomes[req.id].e2e_s

    def _skip(self, req: PRequest, reason: str, after: PRequest | None) -> float:
        """Record `req` as not sent, for `reason`. Output: now (its dependents may go)."""
        self._emit(skipped_record(req, reason))
        self.isolation.leave(req.session, _same_phase(self.phases, req, after))
        return self.clock()

    async def _send(self, req: PRequest, after: PRequest | None,
                    within: bool = False) -> tuple[Outcome, float] | str:
        """Output: the outcome and how long it waited for its turn (isolation, a slot), or why
        it is not sent after all (a stop came meanwhile). A request written ahead holds its slot
        already; one that takes over `req`'s turn (`took_over`) keeps `req`'s. `within`: sent
        inside its session's own isolation (a stretch measured again), which it does not ask
        for."""
        waited = 0.0
        if req.id in self.holding:
            self.holding.discard(req.id)
        else:
            t = self.clock()
            if not within:
                await self.isolation.enter(req)
            if req.isolated:  # nothing of the client's own in its way either
                await self.health.quiet(self.pacing.flush)
            self.queued += 1
            if self.slots.locked() and self.queued <= self.concurrency:
                self.pacing.ahead(req)  # next in line for a slot: made while it waits
            try:
                await self.slots.acquire()
            finally:
                self.queued -= 1
                self.isolation.poke()
            waited = self.clock() - t
            if stop := self.stops.reason(req, self.records):
                self.slots.release()
                self.isolation.poke()
                return stop
            self.sending(req.id)
        chain = chainable(req, after, self.waiting, self.stops.decides(req), self.phases.index)
        try:
            outcome = await self.pacing.send(req, chain, partial(self.cut.__setitem__, req.id))
        finally:
            if chain is None or chain.id not in self.holding:
                self.slots.release()
                self.isolation.poke()
        return outcome, waited

    def may_take_over(self, req: PRequest) -> bool:
        return (not self.queued and self.sink_error is None
                and not self.isolation.claimed(req.session)
                and self.stops.reason(req, self.records) is None)

    def took_over(self, req: PRequest) -> None:
        self.holding.add(req.id)
        self.sending(req.id)

    def _written_at_start(self, req: PRequest) -> None:
        self.slots.take_reserved()
        self.holding.add(req.id)
        self.sending(req.id)

    async def _phase_opened(self, k: int) -> None:
        self.pacing.flush()  # the phase's records before its end
        if self.on_phase:
            await self.on_phase(k)

    # ------------------------------------------------------------ records

    def _keep(self, req: PRequest, outcome: Outcome) -> None:
        try:
            self._emit(self.recorder.make(req, outcome, self.outcomes, self.t0))
        except Exception as exc:  # noqa: BLE001 (raised in the walkers and at the end)
            self.sink_error = self.sink_error or exc

    def _emit(self, rec: Record) -> None:
        """Keep `rec` (what follows may depend on it); the sink gets it when the pacing says."""
        self.records[rec.id] = rec
        self.stops.update(self.by_id[rec.id], rec)
        self.health.recorded()
        self.pacing.later(partial(self._to_sink, rec))

    def _to_sink(self, rec: Record) -> None:
        try:
            self.sink.record(rec)
        except Exception as exc:  # noqa: BLE001 (a full disk stops the run: raised in the walkers)
            self.sink_error = self.sink_error or exc

    def fill_unrun(self) -> None:
        """A record for every request without one, given to the sink too (`fill_unrun`)."""
        fill_unrun(self)


def fill_unrun(ex: Executor) -> None:
    """A record for every request of `ex` without one, given to the sink too (in plan order):
    one in flight when the run was stopped is a sent request with error `interrupted` and what
    it measured until then; one written ahead but never read likewise, from its write; the
    rest were not sent (skipped)."""
    for r in ex.requests:
        if r.id in ex.records:
            continue
        written = (ex.pacing.written_at(r) or (ex.t0, 0.0)) if r.id in ex.holding \
            else None  # written ahead, its answer never read
        o = ex.cut.get(r.id) or (written and interrupted(r, written, ex.clock()))
        rec = ex.recorder.make(r, o, ex.outcomes, ex.t0) if o is not None else \
            skipped_record(r, ex.stops.stop_all or "not run (interrupted)")
        ex.records[r.id] = rec
        ex._to_sink(rec)



def chainable(req: PRequest, after: PRequest | None, waiting: dict[str, int], decides: bool,
              phase: dict[str, int]) -> PRequest | None:
    """Output: `after` when it is due the moment `req`'s answer ends: `req` is the last of its
    dependencies (`waiting`: each request's dependencies not done), no planned wait, send time
    or barrier (`phase`: each request's phase) lies between, it is not timed alone (it waits
    for the run to drain), and nothing about it waits for `req`'s record (`decides`, from
    `Stops.decides`). Else None."""
    if (after is None or after.wait_before or after.wait_per_token or after.isolated
            or after.send_at is not None or req.id not in after.deps
            or waiting[after.id] != 1 or decides or phase[after.id] != phase[req.id]):
        return None
    return after


def links(requests: list[PRequest]) -> tuple[dict[str, list[PRequest]], dict[str, PRequest]]:
    """Output: each request's dependents (of `requests`), and its session's next request in
    plan order (its successor)."""
    dependents: dict[str, list[PRequest]] = {r.id: [] for r in requests}
    successor: dict[str, PRequest] = {}
    last: dict[str, PRequest] = {}
    for r in requests:
        for d in r.deps:
            if d in dependents:
                dependents[d].append(r)
        if r.session in last:
            successor[last[r.session].id] = r
        last[r.session] = r
    return dependents, successor


async def started(start_at: float | None, shared: Shared | None,
                  clock: Callable[[], float]) -> float:
    """Output: the run's start on `clock`: now; or `start_at`, or for a shard the instant every
    shard of the run starts at (`Shared.start`), once it has come (a run that gets there late
    counts from it all the same: its planned send times are the other shards')."""
    if shared is not None:
        start_at = await shared.start()
    if start_at is None:
        return clock()
    await asyncio.sleep(max(0.0, start_at - clock()))
    return start_at


def due_at(req: PRequest, ready: float, opened_s: float, t0: float,
           outcomes: Mapping[str, Outcome], planned_at: dict[str, float]) -> float:
    """Output: when `req` may be sent: `ready` (its dependencies done, its phase open, its
    place taken) plus its planned wait, or its planned send time when that is later. Of a
    request with a send time, `planned_at` gets what its schedule lag counts from: that time,
    or its phase barrier's opening (`opened_s`, from the start) when later: the plan's barrier
    held it there, not the client."""
    due = ready + planned_wait(req, outcomes)
    if req.send_at is None:
        return due
    planned_at[req.id] = max(req.send_at, opened_s)
    return max(due, t0 + req.send_at)


def _same_phase(phases: Phases, req: PRequest, after: PRequest | None) -> PRequest | None:
    """Output: `after` when no phase barrier lies between it and `req`: a session keeps the
    isolation for its next isolated request only then (holding it at a barrier would keep the
    other sessions from reaching it)."""
    return after if after is not None and phases.index[after.id] == phases.index[req.id] else None


def interrupted(req: PRequest, written: tuple[float, float], now: float) -> Outcome:
    """Output: the `interrupted` outcome of a request written ahead (`written`: its send time
    on the run's clock and the wall clock) whose answer nobody read: the run stopped at `now`."""
    t_send, t_unix = written
    return Outcome(id=req.id, t_send=t_send, t_send_unix=t_unix, e2e_s=now - t_send,
                   error=ErrorInfo(kind="interrupted", message="the run was stopped after the "
                                   "request was written, before its answer was read"))
