"""The executor: runs a `Plan` against an endpoint and yields one `Record` per planned request.

Input: a `Plan`, a `Realiser` (text, sized for this engine), an `httpx.AsyncClient`, an
`Endpoint`, a `Sink` that receives every record the moment it completes, and injected clocks.
Output: a `RunResult` (records in schedule order, incomplete reason, client-side timing health).

Semantics: all sessions start together; requests of one session run in plan order (their
dependencies); a phase is a barrier across sessions; the workload's concurrency limit is a
semaphore around the send; a request with a planned send time (`send_at`, a trace's) is not
sent before it, from the run's start; `until` loops skip their remaining iterations once the
condition is seen; fail-fast (a workload option) stops every session at the first miss; by
default every session runs to its end so every verdict can be judged.

Sizing (the engine's /tokenize calls that size each filler text) happens before the clock
starts, for every request: none of it competes with the measured requests, on the engine or in
the client. A request is realised and encoded as soon as its messages are final (every reply it
carries is in): the first ones before the clock, a later one while the request before it is in
flight, at a barrier or during a planned wait; at the start every session's first request is
written in one go (`_write_firsts`).

Work no send waits for is deferred to quiet moments (`_defer`): making a session's next request
ahead (or, when its messages wait for the answer in flight, rendering its new text), building an
answer's record and giving records to the sink. An engine that batches ends many streams in the
same few milliseconds; doing that work in between would delay every session of the burst still
waiting for the loop. It runs once no answer came in for `_QUIET_S`, or once the oldest deferred
work waited `_DEFER_MAX_S`, in passes of about `_SLICE_S`; a pass lets the sessions whose
answers the transport has just read to their end (`responses_ended`) go first, by one loop
turn between two passes that work.

A session's next request is written the moment its answer has been read to its end (`_chain`,
called from `send`), before anything else is done with that answer, when it is due at once: no
planned wait, phase barrier or abort before it, nothing waiting for the answer's record (an
`until` loop, fail-fast, a resend of it) and no other request waiting for a concurrency slot (it
takes over the answer's slot). It is written as bytes — messages encoded once each, the head
made ahead (`_build_early`) — and its httpx request is made at its turn. The session is then
held (`_hold`) until a loop turn passes in which no answer ended (`_release`, one session a turn,
at most `_HOLD_MAX_S`): when answers end together, every one of their next requests is out
before the rest of any of them runs. (Not held when the socket took only part of the request:
the rest goes out at the session's turn, which is then at once.)
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections import ChainMap, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import httpx

from workloadlang.plan.lanes import lane_steps
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.realise import Realiser
from workloadlang.run.client import (Answer, Endpoint, Outcome, WireRequest, body_parts, build,
                                     dumps_kept, head_of, send, warm_up)
from workloadlang.run.contention import Slots
from workloadlang.run.errors import EndpointError, ErrorInfo
from workloadlang.run.isolation import Isolation
from workloadlang.run.transport import (StartWrites, alone, content_length, open_connections,
                                        ready_to_write, responses_ended, send_now,
                                        wire_transport, write_payload)
from workloadlang.run.record import Record, TtftReference, build_record, skipped_record

_FREEZE_EVERY = 32  # records between two gc.freeze() during a run
_QUIET_S = 0.003  # deferred work runs once no answer came in for this long...
_DEFER_MAX_S = 0.05  # ...or once the oldest deferred record is this old
_SLICE_S = 0.0005  # deferred work per loop pass (a long pass delays the answers behind it)
_HOLD_MAX_S = 0.02  # longest a session waits for answers ending after its own (`_release`)
_DELAY_BOUND_S = 0.010  # a client that holds requests back longer than this skews the run
_BOTTLENECK_SHARE = 0.01  # ...when that is also more than this share of a median request
_SIZING_PARALLEL = 32  # tokenizer calls at once while sizing, before the clock


class Sink(Protocol):
    def record(self, rec: Record) -> None: ...

    def event(self, kind: str, data: dict[str, Any]) -> None: ...


class ListSink:
    """A sink that keeps what it is given: `records` and `events` (`(kind, data)`) in order. For
    callers that drive an `Executor` themselves (benches, tests) and read the records after."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def record(self, rec: Record) -> None:
        self.records.append(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))


@dataclass
class RunResult:
    records: list[Record]
    elapsed_s: float
    incomplete: str | None = None
    client: dict[str, Any] = field(default_factory=dict)


class PhaseBarrier:
    """Sessions arrive at barrier k in order; each barrier opens when every session arrived.
    `opened_at[k]` is when barrier k opened (on `clock`)."""

    def __init__(self, sessions: int, n: int, on_open: Callable[[int], Any] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.sessions = sessions
        self.count = [0] * (n + 1)
        self.events = [asyncio.Event() for _ in range(n + 1)]
        self.opened_at: list[float | None] = [None] * (n + 1)
        self.on_open = on_open
        self.clock = clock

    async def arrive(self, k: int) -> None:
        self.count[k] += 1
        if self.count[k] == self.sessions:
            if self.on_open:
                await self.on_open(k)
            self.opened_at[k] = self.clock()
            self.events[k].set()
        await self.events[k].wait()


class Lag:
    """Event-loop lag monitor: how late a 5 ms sleep wakes up (the client as a bottleneck), and
    for the latest of the worst wake-ups how long the loop's thread ran in its interval (its
    CPU time, `cpu_clock`): much less than the interval, the operating system ran something
    else on its CPU and the lag is not the client's own work. About all of it does not prove
    the client was busy: in a VM, time in which the host did not run the virtual CPU at all is
    counted as the thread's own (only the kernel's samples of that CPU tell the two apart,
    e.g. `perf record -C`)."""

    def __init__(self, clock: Callable[[], float],
                 cpu_clock: Callable[[], float] = time.thread_time):
        self.clock, self.cpu_clock, self.samples = clock, cpu_clock, []
        # (lag, the thread's CPU in its interval, when it ended on `clock`)
        self.worst: tuple[float, float, float] | None = None

    async def watch(self) -> None:
        while True:
            t, cpu = self.clock(), self.cpu_clock()
            await asyncio.sleep(0.005)
            lag = max(0.0, self.clock() - t - 0.005)
            self.samples.append(lag)
            if self.worst is None or lag >= self.worst[0]:
                self.worst = (lag, self.cpu_clock() - cpu, self.clock())


class GcPauses:
    """The garbage collector's pauses during the run (`gc.callbacks`): the longest one and its
    generation, so that a loop stall the client's thread spent running can be told apart from
    a collection. `clock` is a monotonic clock (tests inject one). The latest `keep` pauses
    are kept, so that a request's wait can be asked how much of it was the collector's
    (`within`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, keep: int = 256):
        self.clock = clock
        self.started: float | None = None
        self.longest: tuple[float, int] | None = None  # (seconds, generation)
        self.count = 0
        self.recent: deque[tuple[float, float]] = deque(maxlen=keep)  # (start, end) on clock

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = self.clock()
        elif self.started is not None:
            end = self.clock()
            self.recent.append((self.started, end))
            pause, self.started = end - self.started, None
            self.count += 1
            if self.longest is None or pause > self.longest[0]:
                self.longest = (pause, info.get("generation", -1))

    def within(self, begin: float, end: float) -> float:
        """Output: seconds of [begin, end] (on `clock`) in which the collector ran, from the
        pauses kept."""
        return sum(min(e, end) - max(s, begin) for s, e in self.recent if e > begin and s < end)


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Executor:
    """One run of one plan. Use `await Executor(...).run()`."""

    def __init__(self, plan: Plan, realiser: Realiser, client: httpx.AsyncClient,
                 endpoint: Endpoint, sink: Sink, *, ref: TtftReference | None = None,
                 clock: Callable[[], float] = time.perf_counter, concurrency: int | None = None,
                 time_budget_s: float | None = None, max_consecutive_errors: int = 10,
                 on_phase: Callable[[str], Any] | None = None, prefill_own: bool = False):
        self.plan, self.realiser, self.client, self.endpoint = plan, realiser, client, endpoint
        self.sink, self.clock = sink, clock
        self.ref = ref or TtftReference()
        self.concurrency = concurrency or plan.concurrency
        self.sem = Slots(self.concurrency, clock)  # and who was in flight when (`_record`)
        # `isolated` requests: timed with nothing else of the run in flight (run.isolation)
        self.isolation = Isolation(lambda: self.sem.held > 0 or self.queued > 0, clock,
                                   on_alone=alone)
        self.prefill_own = prefill_own  # the engine's prefill time is the request's own work
        self.time_budget_s = time_budget_s
        self.max_errors = max_consecutive_errors
        self.on_phase = on_phase
        self.by_id = plan.by_id()
        self.outcomes: dict[str, Outcome] = {}
        self.cut: dict[str, Outcome] = {}  # in flight when the run was stopped (`fill_unrun`)
        self.records: dict[str, Record] = {}
        self.stopped: dict[str, int] = {}
        self.stop_all: str | None = None
        self.errors_in_row = 0
        self.delays: list[float] = []
        # (delay, could go on, sent, of it the collector's pauses)
        self.worst_delay: tuple[float, float, float, float] | None = None
        self.gcs = GcPauses(clock)
        self.cold_pp: list[float] = []
        self.learnt_ref: tuple[int, TtftReference | None] = (0, None)  # (samples, reference)
        self.sizing_failed = False
        self.t0 = 0.0
        self.by_session: dict[str, list[PRequest]] = {s.id: [] for s in plan.sessions}
        for r in plan.requests:
            self.by_session.setdefault(r.session, []).append(r)
        self.built: dict[str, tuple[WireRequest, httpx.Request]] = {}  # made ahead of the send
        self.unfrozen = 0  # records since the last gc.freeze()
        self.pending: list[Record] = []  # kept, not yet given to the sink (`_flush`)
        self.unrecorded: list[tuple[PRequest, Outcome]] = []  # answered, record not built yet
        self.resent = {r.prefix_source for r in plan.requests if r.kind == "resend"}
        self.sink_error: Exception | None = None
        self.flush_due = False  # a `_deferred` pass is scheduled
        self.ahead: list[PRequest] = []  # next requests to make ahead (deferred)
        self.wired: set[str] = set()  # requests whose send has begun (`_wire`)
        self.last_answer = 0.0  # loop time the last answer came in
        self.ends_seen = 0  # `responses_ended()` at the last `_deferred` pass
        self.yielded = False  # the last `_deferred` pass only yielded a loop turn
        self.deferred_since: float | None = None  # loop time the oldest deferred work was queued
        self.written: set[str] = set()  # written ahead of their turn (`_write_firsts`,
        # `_chain`), each holding a concurrency slot
        self.queued = 0  # requests waiting for a concurrency slot
        self.writes_bytes = False  # the client's transport writes bytes for `_chain` (`run`)
        self.held: deque[tuple[float, asyncio.Future]] = deque()  # `_hold`: since, future
        self.held_ends = 0  # `responses_ended()` when `_release` last looked
        self.heads: dict[str, bytes] = {}  # HTTP heads made ahead for `_chain` (`_build_early`)
        # what `_chain` wrote: the body's parts, the transport's note of the write
        self.chained: dict[str, tuple[list[bytes], dict[str, Any]]] = {}

    # ------------------------------------------------------------ the run

    async def run(self) -> RunResult:
        sessions = [s.id for s in self.plan.sessions]
        firsts = [self.by_session[s][0] for s in sessions if self.by_session.get(s)]
        await self._size_all(sessions)  # before the clock starts
        for req in firsts:  # the start (all sessions at once) then only sends
            if not req.send_at:  # one sent later is made while it waits for its time
                self._build_early(req)
        await open_connections(self.client, self.endpoint.chat_url,
                               min(len(self.built), self.concurrency))
        warm_up()
        self.writes_bytes = wire_transport(self.client, httpx.URL(self.endpoint.chat_url)) \
            is not None
        startable = self._startable(firsts)
        # What exists now (the plan, the modules, the realised texts) lives through the run: keep
        # it out of the garbage collector's scans, so a full collection mid-run walks only what
        # the run itself made (a 70 ms pause stalled every stream at 64 sessions otherwise)
        gc.collect()
        gc.freeze()
        writes = StartWrites.claim(self.client, self.endpoint.chat_url, len(startable))
        if writes is not None:  # else nothing is written at the start: no slot to reserve
            await self.sem.reserve(len(startable))
        self.t0 = self.clock()
        self._write_firsts(startable, writes)
        barrier = PhaseBarrier(len(sessions), len(self.plan.phases), self._phase_opened,
                               self.clock)
        lag = Lag(self.clock)
        lag_task = asyncio.ensure_future(lag.watch())
        start = asyncio.Event()
        tasks = [asyncio.ensure_future(self._session(s, barrier, start)) for s in sessions]
        start.set()
        try:
            with self.gcs:
                await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            lag_task.cancel()
            alone(False)  # a run stopped in an isolated stretch leaves the reader as it was
            gc.unfreeze()
            self.ahead.clear()  # nothing is sent any more
            self._flush()
            self.fill_unrun()
        if self.sink_error is not None:
            raise self.sink_error
        return RunResult(records=[self.records[r.id] for r in self.plan.requests],
                         elapsed_s=self.clock() - self.t0, incomplete=self._incomplete(),
                         client=self._client_health(lag))

    def _startable(self, firsts: list[PRequest]) -> list[PRequest]:
        """Before the clock: the first requests the start can write at once (built, due at the
        start: no planned wait, no barrier before them), serialised for the transport."""
        out = []
        for req in firsts:
            ahead = self.built.get(req.id)
            if ahead is None or req.wait_before or req.phase or req.isolated or req.send_at:
                continue  # a phase starts at a barrier; an isolated request waits its turn; a
                # request with a planned send time waits for it
            if ready_to_write(self.client, ahead[1]):
                out.append(req)
        return out

    def _write_firsts(self, reqs: list[PRequest], writes: StartWrites | None) -> None:
        """At the start: write the startable first requests on the connections claimed for
        them (`writes`), one after the other with nothing in between, as many as concurrency
        slots were reserved (each holds one from its write on); then start reading their
        answers. The sessions then read the answers; one that was not written goes the usual
        way, and the slots no request took are given back."""
        try:
            if writes is not None:
                for req in reqs[:self.sem.reserved]:
                    if self._skip_reason(req):
                        break
                    if writes.write(self.built[req.id][1]):
                        self.sem.take_reserved()
                        self.written.add(req.id)
        finally:
            self.sem.unreserve()
            if writes is not None:
                writes.begin_reading()
                writes.close()

    async def _phase_opened(self, k: int) -> None:
        self._flush()  # the phase's records before its end
        if self.on_phase and k > 0:
            await self.on_phase(self.plan.phases[k - 1])

    async def _session(self, sid: str, barrier: PhaseBarrier, start: asyncio.Event) -> None:
        await start.wait()
        at = 0
        mine = self.by_session.get(sid, [])
        free = self.t0  # when this session could go on: start, a barrier, the last answer
        for req, nxt, block in lane_steps(mine, 0):
            k = self.plan.phases.index(req.phase) + 1 if req.phase else at
            if at < k:  # the phase's barrier: make the request while the others finish
                self._build_early(req)
            while at < k:
                await barrier.arrive(at)
                free = max(free, barrier.opened_at[at] or free)
                at += 1
            free = await (self._one(req, nxt, free) if block is None
                          else self._fork(block, 1, free))
        self.isolation.leave(sid, None)
        while at <= len(self.plan.phases):
            await barrier.arrive(at)
            at += 1

    async def _fork(self, branches: list[list[PRequest]], depth: int, free: float) -> float:
        """A parallel fork's branches, each a lane of its session's requests sent in order,
        all side by side. Output: when the last of them ended."""
        return max([free, *await asyncio.gather(*(self._lane(b, depth, free)
                                                  for b in branches))])

    async def _lane(self, reqs: list[PRequest], depth: int, free: float) -> float:
        for req, nxt, block in lane_steps(reqs, depth):
            free = await (self._one(req, nxt, free) if block is None
                          else self._fork(block, depth + 1, free))
        return free

    async def _one(self, req: PRequest, after: PRequest | None, free: float) -> float:
        """Send one request, or record why not; make `after` (the session's next request) while
        this one is in flight, if its messages are final. Output: when the session can go on
        (the answer's end).

        The client's own delay is measured from `free` — the moment the session could go on:
        the run's start, a phase barrier opening, or the previous answer's last byte arriving —
        to the send, minus the planned wait and the wait for a concurrency slot: waiting for
        the event loop to get to the session, realising the prompt and building the request
        when that could not be done ahead.
        """
        if self.sink_error is not None:
            raise self.sink_error
        reason = None if req.id in self.written else self._skip_reason(req)  # sent already
        if reason:
            self.built.pop(req.id, None)
            self._emit(skipped_record(req, reason))
            self.isolation.leave(req.session, _same_phase(req, after))
            return max(free, self.clock())
        if after is not None:  # at a quiet moment while this one is in flight
            self.ahead.append(after)
            self._defer()
        if req.wait_before:  # the planned wait: make the request meanwhile
            self._build_early(req)
            await asyncio.sleep(req.wait_before)
        due = free + req.wait_before  # planned: from the session's going on, or the send time
        if req.send_at is not None:
            due = max(due, self.t0 + req.send_at)
            if due > self.clock():  # a trace request: not before its time
                self._build_early(req)
                await asyncio.sleep(due - self.clock())
        wire, request = self._wire(req)
        outcome, slot_wait = await self._send(req, wire, request, self._chainable(req, after))
        self.isolation.leave(req.session, _same_phase(req, after))
        self.last_answer = asyncio.get_running_loop().time()
        own = (outcome.t_send - due) - slot_wait
        self.delays.append(max(0.0, own))
        if self.worst_delay is None or own > self.worst_delay[0]:
            self.worst_delay = (own, free, outcome.t_send, self.gcs.within(free, outcome.t_send))
        self.outcomes[req.id] = outcome
        if self._needed_now(req, outcome):
            self._flush()  # the records of earlier answers first: stops and sink in order
            self._emit(self._record(req, outcome))
        else:  # at a quiet moment
            self.unrecorded.append((req, outcome))
            self._defer()
        return outcome.t_send + outcome.e2e_s

    async def _send(self, req: PRequest, wire: WireRequest, request: httpx.Request | None,
                    after: PRequest | None) -> tuple[Outcome, float]:
        """Output: the outcome and how long the request waited for its turn: for the run's
        isolation (`Isolation.enter`) and for a concurrency slot. A request written ahead
        (`written`) holds its slot already. With `after`, the session's next request is written
        the moment this answer has been read (`_chain`), and then keeps the slot."""
        slot_wait = 0.0
        if req.id in self.written:
            self.written.discard(req.id)
        else:
            t_queue = self.clock()
            await self.isolation.enter(req)
            self.queued += 1
            try:
                await self.sem.acquire()
            finally:
                self.queued -= 1
                self.isolation.poke()
            slot_wait = self.clock() - t_queue
        chained = False

        def then(answer: Answer) -> asyncio.Future | None:
            nonlocal chained
            chained = self._chain(req, after, answer) if after is not None else False
            # held only once its bytes are all out: the rest of a partial write is sent at
            # its session's turn, and its TTFT counts from the first byte
            return self._hold() if chained and self._all_written(after) else None

        try:
            outcome = await send(self.client, self.endpoint, wire, request=request,
                                 clock=self.clock, then=then if after is not None else None,
                                 on_cancel=lambda o: self.cut.__setitem__(req.id, o))
        finally:
            if not chained:
                self.sem.release()
                self.isolation.poke()
        return outcome, slot_wait

    def _chainable(self, req: PRequest, after: PRequest | None) -> PRequest | None:
        """Output: `after` when it may be written as soon as `req`'s answer is in (`_chain`):
        no planned wait and no phase barrier before it, nothing about it waits for `req`'s
        record (see `_decides`), and no planned abort (its session may be held a moment before
        reading its answer, `_hold`, and an abort is exact only when read at once). Else None."""
        if (after is None or after.wait_before or after.abort_after or after.isolated
                or after.send_at
                or (after.phase and after.phase != req.phase)):
            return None  # an isolated request waits for the run to drain (`_send`)
        return None if self._decides(req) else after

    def _chain(self, req: PRequest, after: PRequest, answer: Answer) -> bool:
        """Called the moment `req`'s answer has been read to its end, without error (its
        connection idle again): write `after`, the session's next request, at once, on `req`'s
        concurrency slot, unless another request waits for a slot, a stop applies, or it cannot
        be made. What the session does with `req`'s outcome comes after: when answers end
        together (an engine ending a batch), each session's next request is out before any
        of them is recorded. Output: True when written (it is then in `written`)."""
        if (not self.writes_bytes or self.queued or self.sink_error is not None
                or self.isolation.claimed(after.session) or self._skip_reason(after)):
            return False
        try:
            ahead = self.built.get(after.id)
            if ahead is not None:
                if not (ready_to_write(self.client, ahead[1])
                        and send_now(self.client, ahead[1])):
                    return False
            else:
                wire = self._make_wire(after, ChainMap({req.id: answer}, self.outcomes))
                if not all(type(m) is bytes for m in wire.messages):
                    return False  # it carries another reply, not in yet
                if not self._write_bytes(wire):
                    return False
                self.built[after.id] = (wire, None)
        except Exception:  # noqa: BLE001 (made again at its turn, where errors are recorded)
            return False
        self.written.add(after.id)
        return True

    def _all_written(self, req: PRequest) -> bool:
        """Output: True when every byte of `req`, written by `_chain`, went into the socket."""
        chained = self.chained.get(req.id)
        written = chained[1] if chained is not None else self.built[req.id][1].extensions
        return not written["wl_conn"][1]

    def _hold(self) -> asyncio.Future:
        """Output: a future that `_release` resolves, for a session whose next request `_chain`
        wrote and that has the rest of its answer to deal with (its outcome and record, the
        httpx request of what was written, reading its answer)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self.held:
            self.held_ends = responses_ended()
            loop.call_soon(self._release)
        self.held.append((loop.time(), fut))
        return fut

    def _release(self) -> None:
        """Loop callback, once a loop turn while sessions are held (`_hold`): let the oldest
        one go on, unless answers were read to their end since the last turn — their
        sessions' next requests (`_chain`) go first — and it has waited less than
        `_HOLD_MAX_S`. One a turn, so that answers ending meanwhile wait for one session's
        rest, not for all of them."""
        loop = asyncio.get_running_loop()
        ends = responses_ended()
        now = loop.time()
        if ends == self.held_ends or now - self.held[0][0] >= _HOLD_MAX_S:
            _, fut = self.held.popleft()
            if not fut.done():
                fut.set_result(None)
        self.held_ends = ends
        if self.held:
            loop.call_soon(self._release)

    def _write_bytes(self, wire: WireRequest) -> bool:
        """Write `wire` as bytes, its httpx request left to its turn (`_wire`): its body, and
        its head made ahead (`_build_early`) or now. Output: True when written."""
        head = self.heads.pop(wire.id, None) or head_of(self.endpoint, wire)
        parts = body_parts(self.endpoint, wire)
        written = write_payload(self.client, self.endpoint.chat_url,
                                [head, content_length(sum(map(len, parts))), *parts])
        if written is None:
            return False
        self.chained[wire.id] = (parts, written)
        return True

    def _wire(self, req: PRequest) -> tuple[WireRequest, httpx.Request | None]:
        """Output: the request to send now, and its httpx request when it was built ahead."""
        self.wired.add(req.id)
        self.heads.pop(req.id, None)
        ahead = self.built.pop(req.id, None)
        if ahead is None:
            return self._make_wire(req), None
        wire, request = ahead
        chained = self.chained.pop(req.id, None)
        if self.time_budget_s:  # what was left of the budget when it was sent (built earlier)
            sent = (chained[1] if chained is not None else
                    request.extensions if request is not None else {}).get("wl_sent")
            at = sent[1] if sent is not None and sent[0] is self.clock else None
            wire = wire.model_copy(update=self._deadline_fields(at))
        if chained is not None:  # `_chain` wrote its bytes: now the httpx request of them
            request = build(self.endpoint, wire, b"".join(chained[0]))
            request.extensions.update(chained[1])
        return wire, request

    def _make_wire(self, req: PRequest,
                   replies: Mapping[str, Any] | None = None) -> WireRequest:
        """Output: the request as sent, its messages carrying `replies` (by default the
        outcomes so far), its deadline what is left now (`_deadline_fields`). Not re-validated:
        every field comes from the checked plan and the realiser (validating the messages
        copied each of them, on the path from an answer to the next send)."""
        return WireRequest.model_construct(
            id=req.id, messages=self.realiser.encoded(
                req, self.outcomes if replies is None else replies, dumps_kept),
            max_tokens=req.max_tokens, options=req.options, abort_after=req.abort_after,
            headers=self._headers(req), **self._deadline_fields())

    @staticmethod
    def _headers(req: PRequest) -> dict[str, str]:
        return {"X-WL-Session": req.session, "X-WL-Request": req.id}

    def _build_early(self, req: PRequest) -> None:
        """Realise and encode `req` now, ahead of its send (before the clock, while the request
        before it is in flight, at a barrier, during a planned wait), when its messages are
        final: every reply they carry is in. With a time budget the deadline is what is left now
        (`_wire` shortens it at the send). One that cannot be made is made again at its send,
        where what goes wrong is recorded (this may run as a loop callback: nothing escapes)."""
        if req.id in self.built or req.id in self.wired:
            return
        if not self.realiser.can_realise(req, self.outcomes):
            self.realiser.encoded(req, self.outcomes, dumps_kept)  # its new text at least
            try:  # and the head `_chain` writes it with
                self.heads[req.id] = head_of(self.endpoint, WireRequest.model_construct(
                    id=req.id, messages=[], max_tokens=req.max_tokens, options=req.options,
                    abort_after=req.abort_after, headers=self._headers(req),
                    **self._deadline_fields()))
            except Exception:  # noqa: BLE001 (see above)
                pass
            return
        try:
            wire = self._make_wire(req)
            self.built[req.id] = (wire, build(self.endpoint, wire))
        except Exception:  # noqa: BLE001 (see above)
            return

    async def _size_all(self, sessions: list[str]) -> None:
        """Before the clock: size every request's fillers; sessions side by side (at most
        `_SIZING_PARALLEL` tokenizer calls at once), a session's requests in order (a filler
        they share is sized once)."""
        limit = asyncio.Semaphore(_SIZING_PARALLEL)

        async def session(sid: str) -> None:
            for req in self.by_session.get(sid, []):
                async with limit:
                    await self._prepare(req)

        await asyncio.gather(*(session(s) for s in sessions))

    async def _prepare(self, req: PRequest) -> None:
        """Size the request's filler with the engine's tokenizer; if the tokenizer stops working
        mid-run, say so once and size the rest by the calibrated ratio (the run goes on)."""
        if self.sizing_failed:
            return
        try:
            await self.realiser.prepare(req)
        except EndpointError as e:
            if self.sizing_failed:  # another session saw it first
                return
            self.sizing_failed = True
            self.sink.event("note", {"message": f"the engine's tokenizer failed ({e}); text not "
                                     "sized yet is sized by the calibrated tokens-per-word ratio"})

    def _record(self, req: PRequest, o: Outcome) -> Record:
        src_req = self.by_id.get(req.prefix_source) if req.prefix_source else None
        # the branch a `keep` went on from: its outcome, with the planned shape the plan's
        # expectation was made with (branch 0's)
        source = self.realiser.source_of(req)
        if source != req.prefix_source:
            req = req.model_copy(update={"prefix_source": source})
        src = self.outcomes.get(req.prefix_source) if req.prefix_source else None
        rec = build_record(req, o, src_req=src_req, src=src, hit_ratio=self.plan.hit_ratio,
                           ref=self._reference(), t0=self.t0, contended_s=self._contended(o),
                           prefill_contended_s=self._prefill_contended(o),
                           isolation=(req.isolated, self.isolation.waited.get(req.id),
                                      self.isolation.held.get(req.id)))
        self._learn_cold_speed(rec)
        return rec

    def _emit(self, rec: Record) -> None:
        """Keep `rec` (the session's next step may depend on it); the sink gets it from `_flush`
        at a quiet moment (`_defer`): the sink's writes and the printed line are then off the
        path from an answer to the next send."""
        self.records[rec.id] = rec
        self._update_stops(rec)
        self.pending.append(rec)
        self._defer()
        self.unfrozen += 1
        if self.unfrozen >= _FREEZE_EVERY:
            # what the run keeps (records, answers) joins the frozen heap: the collector's
            # older generations stay small, so no collection walks the whole run's results
            # (measured: 50 ms full and 10-15 ms middle-generation pauses at 256 sessions)
            self.unfrozen = 0
            gc.freeze()

    def _needed_now(self, req: PRequest, outcome: Outcome) -> bool:
        """Output: True when what follows may depend on this request's record at once: an
        error (the errors-in-a-row stop) or what `_decides`."""
        return outcome.error is not None or self._decides(req)

    def _decides(self, req: PRequest) -> bool:
        """Output: True when `req`'s record, whatever it says, may decide what is sent next:
        an `until` loop, fail-fast, a resend of it."""
        return bool(req.stop_group) or self.plan.fail_fast or req.id in self.resent

    def _defer(self) -> None:
        """Make sure a `_deferred` pass is scheduled."""
        if self.flush_due:
            return
        self.flush_due = True
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.deferred_since is None:
            self.deferred_since = now
        loop.call_later(defer_wait(now, self.last_answer, self.deferred_since), self._deferred)

    def _deferred(self) -> None:
        """Loop callback: once quiet (no answer for `_QUIET_S`) or once the oldest deferred work
        waited `_DEFER_MAX_S`: make the next requests ahead, then build and write records, for
        about `_SLICE_S`; the rest on the next pass (the same test again). A pass that finds
        answers read to their end since the last one does nothing but yield a loop turn (the
        steps of their sessions, queued by then, run first), unless the pass before it did."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait = defer_wait(now, self.last_answer, self.deferred_since or now)
        if wait:
            loop.call_later(wait, self._deferred)
            return
        ends = responses_ended()
        if ends != self.ends_seen and not self.yielded:
            # answers ended since the last pass and their sessions' steps are queued on the
            # loop: one loop turn for them first (once between two passes that work, so that
            # answers ending all the time cannot starve the records)
            self.ends_seen, self.yielded = ends, True
            loop.call_soon(self._deferred)
            return
        self.ends_seen, self.yielded = ends, False
        until = now + _SLICE_S
        while self.ahead and loop.time() < until:
            self._build_early(self.ahead.pop(0))
        while self.unrecorded and loop.time() < until:
            self._flush(1)
        if not self.unrecorded:
            self._flush(0)  # what `_emit` queued for the sink without deferring the record
        if self.unrecorded or self.pending or self.ahead:
            loop.call_soon(self._deferred)
        else:
            self.flush_due = False
            self.deferred_since = None

    def _flush(self, limit: int | None = None) -> None:
        """Build the records of answers whose sessions went on first (at most `limit`), then
        give the sink every pending record, in completion order. An error in either (a full
        disk) stops the run: it is raised in the sessions' tasks and at the end."""
        if limit is None or len(self.unrecorded) <= limit:
            todo, self.unrecorded = self.unrecorded, []
        else:
            todo, self.unrecorded = self.unrecorded[:limit], self.unrecorded[limit:]
        try:
            for req, outcome in todo:
                self._emit(self._record(req, outcome))
            pending, self.pending = self.pending, []
            for rec in pending:
                self.sink.record(rec)
        except Exception as exc:  # noqa: BLE001 (re-raised in the sessions' tasks)
            self.sink_error = self.sink_error or exc

    # ------------------------------------------------------------ stopping

    def _skip_reason(self, req: PRequest) -> str | None:
        if self.stop_all:
            return self.stop_all
        if req.stop_group and self.stopped.get(req.stop_group, 1 << 30) < (req.stop_iter or 0):
            return f"`until {req.stop_on}` reached in an earlier iteration"
        src = self.records.get(req.prefix_source or "")
        if req.kind == "resend" and src is not None and (src.error or src.skipped):
            # Re-sending a prompt that never reached the engine measures nothing about retention.
            return f"the request it re-sends ({src.id}) failed"
        if self.time_budget_s and self.clock() - self.t0 > self.time_budget_s:
            self.stop_all = "time budget exhausted"
            return self.stop_all
        return None

    def _update_stops(self, rec: Record) -> None:
        req = self.by_id[rec.id]
        if rec.skipped:
            return
        self.errors_in_row = self.errors_in_row + 1 if rec.error else 0
        if self.errors_in_row >= self.max_errors and not self.stop_all:
            self.stop_all = f"too many errors ({self.errors_in_row} in a row)"
        if req.stop_group and stop_condition(req.stop_on, rec):
            self.stopped.setdefault(req.stop_group, req.stop_iter or 0)
        if self.plan.fail_fast and rec.hit is False and not self.stop_all:
            self.stop_all = f"fail-fast: miss at {rec.id}"

    def fill_unrun(self) -> None:
        """A record for every request without one, given to the sink too (in plan order): one
        in flight when the run was stopped is a sent request with error `interrupted` and what
        it measured until then; one written ahead but never read likewise, from its write; the
        rest were not sent (skipped)."""
        for r in self.plan.requests:
            if r.id in self.records:
                continue
            o = self.cut.get(r.id) or self._written_outcome(r.id)
            rec = self._record(r, o) if o is not None else \
                skipped_record(r, self.stop_all or "not run (interrupted)")
            self.records[r.id] = rec
            try:
                self.sink.record(rec)
            except Exception as exc:  # noqa: BLE001 (the run is ending: kept for run_plan)
                self.sink_error = self.sink_error or exc

    def _written_outcome(self, rid: str) -> Outcome | None:
        """An `interrupted` outcome for a request written ahead (start writes, `_chain`) whose
        session never read its answer; None when it was not written."""
        if rid not in self.written:
            return None
        ahead = self.built.get(rid)
        sent = ahead[1].extensions.get("wl_sent") if ahead is not None else None
        t_send, t_unix = (sent[1], sent[2]) if sent is not None and sent[0] is self.clock \
            else (self.t0, 0.0)
        return Outcome(id=rid, t_send=t_send, t_send_unix=t_unix, e2e_s=self.clock() - t_send,
                       error=ErrorInfo(kind="interrupted", message="the run was stopped after "
                                       "the request was written, before its answer was read"))

    def _incomplete(self) -> str | None:
        if self.stop_all and not self.stop_all.startswith("fail-fast"):
            return self.stop_all
        if any(r.skipped == "not run (interrupted)" for r in self.records.values()):
            return "interrupted"
        sent = [r for r in self.records.values() if not r.skipped]
        if sent and all(r.error is not None for r in sent):
            # Nothing was measured: not a pass, even when no gate reads the errors.
            return f"every request failed ({len(sent)} errors)"
        return None

    # ------------------------------------------------------------ timing references

    def _deadline_fields(self, at: float | None = None) -> dict[str, Any]:
        """Output: a request's `deadline_s` made now, or for a request sent already at `at`
        (on `clock`: its deadline counts from then) — the workload's timeout, or what is left
        of the run's time budget when that is less (then `budget_cut`)."""
        if not self.time_budget_s:
            return {"deadline_s": self.plan.timeout_s, "budget_cut": False}
        now = self.clock() if at is None else at
        left = self.time_budget_s - (now - self.t0 if self.t0 else 0.0)
        deadline = max(0.001, min(self.plan.timeout_s, left))
        return {"deadline_s": deadline, "budget_cut": deadline < self.plan.timeout_s}

    def _contended(self, o: Outcome) -> float | None:
        """Output: how long, between `o`'s send and its first token, another request of the
        run was in flight (`Slots.overlap`); None without a first token."""
        if o.ttft_s is None:
            return None
        return self.sem.overlap(o.t_send, o.t_send + o.ttft_s)

    def _prefill_contended(self, o: Outcome) -> float | None:
        """Output: how long, within the engine's own prefill time of `o` (ending at its first
        token), another request of the run was in flight — an engine running several requests
        at once shares its batches among them, and its prefill time holds that; 0 when the
        engine's prefill time is its own work (`EngineInfo.prefill_own`: one request at a time,
        the others waiting outside it); None without the engine's prefill time."""
        if o.server_prefill_ms is None or o.ttft_s is None:
            return None
        if self.prefill_own:
            return 0.0
        first = o.t_send + o.ttft_s
        return self.sem.overlap(max(o.t_send, first - o.server_prefill_ms / 1000), first)

    def _learn_cold_speed(self, rec: Record) -> None:
        """Keep the prefill speed of a cold request (nothing served from cache, at least 256
        tokens) whose prefill time is its own: no other request of the run was in flight in it
        (`prefill_contended_s` / `ttft_contended_s` 0, as for an isolated request) and its
        first-token stamp is not late by more than 5 % of it. A prefill that shared the engine
        looks slower than a cold prefill is, and a recompute would then pass for a hit."""
        cold = rec.cached_tokens is not None and rec.prompt_tokens and \
            rec.cached_tokens <= 0.1 * rec.prompt_tokens
        if not (cold and rec.error is None and rec.prefill_s
                and (rec.uncached_tokens or 0) >= 256):
            return
        server = rec.prefill_source == "server"
        shared = rec.prefill_contended_s if server else rec.ttft_contended_s
        late = 0.0 if server else (rec.ttft_late_s or 0.0)
        if (shared or 0.0) > 0 or late > 0.05 * rec.prefill_s:
            return
        self.cold_pp.append(rec.uncached_tokens / rec.prefill_s)

    def _reference(self) -> TtftReference:
        """Output: the timing reference for the next record: the calibrated one, its cold
        prefill speed, when calibration gave none, the median of the cold prefills measured so
        far (made again only when one more was measured: a record is built per answer)."""
        if self.ref.cold_prefill_tps or not self.cold_pp:
            return self.ref
        if self.learnt_ref[0] != len(self.cold_pp):
            self.learnt_ref = (len(self.cold_pp), self.ref.model_copy(
                update={"cold_prefill_tps": percentile(self.cold_pp, 0.5)}))
        return self.learnt_ref[1]

    def _client_health(self, lag: Lag) -> dict[str, Any]:
        ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
        health = {
            "loop_lag_p99_ms": ms(percentile(lag.samples, 0.99)),
            "loop_lag_max_ms": ms(max(lag.samples, default=None)),
            # of the worst lag's interval (5 ms + the lag), how long the loop's thread ran
            "loop_lag_max_ran_ms": ms(lag.worst[1] if lag.worst else None),
            # when it ended, in seconds since the run's start (the records' t_start_s)
            "loop_lag_max_at_s": round(lag.worst[2] - self.t0, 3) if lag.worst else None,
            "client_delay_p99_ms": ms(percentile(self.delays, 0.99)),
            "client_delay_max_ms": ms(max(self.delays, default=None)),
            **self._worst_delay_evidence(),
            # how many requests the client delayed more than `_DELAY_BOUND_S`
            "client_delay_over_10ms": sum(1 for d in self.delays if d > _DELAY_BOUND_S),
            # how many first-token stamps may be more than 1 ms late (`ttft_late_s`), and the
            # largest such bound
            "ttft_late": sum(1 for o in self.outcomes.values() if o.ttft_late_s is not None),
            "ttft_late_max_ms": ms(max((o.ttft_late_s for o in self.outcomes.values()
                                        if o.ttft_late_s is not None), default=None)),
            # the collector's longest pause during the run, and its generation
            "gc_pause_max_ms": ms(self.gcs.longest[0] if self.gcs.longest else None),
            "gc_pause_max_generation": self.gcs.longest[1] if self.gcs.longest else None,
            # what `isolated` requests cost (run.isolation): count, drain waits, others held
            # back, and the time the run went one request at a time
            **self.isolation.summary(),
        }
        e2e = [o.e2e_s for o in self.outcomes.values() if o.e2e_s]
        health["client_bottleneck"] = bottleneck(
            max(percentile(lag.samples, 0.99) or 0.0, percentile(self.delays, 0.99) or 0.0),
            statistics.median(e2e) if e2e else None)
        return health

    def _worst_delay_evidence(self) -> dict[str, Any]:
        """Output: of the request the client delayed most, when it was sent (seconds since the
        run's start), how many other requests the client sent while it waited (about none when
        the loop stalled: its own work, the collector, or no CPU; N - 1 when it came last of N
        answers that ended together and were turned around one by one) and how long of the
        wait the garbage collector ran (ms)."""
        if self.worst_delay is None:
            return {"client_delay_max_at_s": None, "client_delay_max_sends_meanwhile": None,
                    "client_delay_max_gc_ms": None}
        _, free, sent, collector = self.worst_delay
        meanwhile = sum(1 for o in self.outcomes.values() if free < o.t_send < sent)
        return {"client_delay_max_at_s": round(sent - self.t0, 3),
                "client_delay_max_sends_meanwhile": meanwhile,
                "client_delay_max_gc_ms": round(collector * 1000, 3)}


def bottleneck(worst_p99_s: float, e2e_median_s: float | None) -> bool:
    """Input: the larger of the loop lag's and the client delay's 99th percentiles, the median
    request's end-to-end time (None when none completed). Output: True when the client held
    requests back enough to shape the load: a p99 above `_DELAY_BOUND_S` that is also more than
    `_BOTTLENECK_SHARE` of a median request (12 ms in front of 10-second requests changes the
    offered load by a tenth of a percent; in front of 10 ms requests it doubles their time)."""
    if worst_p99_s <= _DELAY_BOUND_S:
        return False
    return e2e_median_s is None or worst_p99_s > _BOTTLENECK_SHARE * e2e_median_s


def defer_wait(now: float, last_answer: float, since: float) -> float:
    """Input: the time now, of the last answer and since deferred work waits (one clock).
    Output: seconds to wait before doing deferred work: 0 once no answer came in for `_QUIET_S`
    or once the work waited `_DEFER_MAX_S`, else until the sooner of the two."""
    return max(0.0, min(_QUIET_S - (now - last_answer), _DEFER_MAX_S - (now - since)))


def _same_phase(req: PRequest, after: PRequest | None) -> PRequest | None:
    """Output: `after` when no phase barrier lies between it and `req`: a session keeps the
    isolation for its next isolated request only then (holding it at a barrier would keep the
    other sessions from reaching it)."""
    return after if after is not None and after.phase == req.phase else None


def stop_condition(on: str | None, rec: Record) -> bool:
    if on == "miss":
        return rec.hit is False
    if on == "hit":
        return rec.hit is True
    return on == "error" and rec.error is not None
