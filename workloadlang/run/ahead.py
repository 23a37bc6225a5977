"""The latency pacing: requests written ahead of their turn over the wire client's pool.

Input: the wire `Pool` the chat requests go through and the executor's core (`pacing.Core`).
Output: each request's `Outcome` (`send`), with as little of the client between an answer's end
and the next request's send as can be.

- Made ahead. A request is realised, encoded and framed (`Outgoing`) as soon as its messages are
  final (every reply it carries is in): the first ones before the clock (at most `_START_MADE`
  of them, or the concurrency), a later one while the request before it is in flight, at a
  barrier, during a planned wait, or while it waits for a slot (`prepare`, `ahead`).
- The start. Every session's first request due at once is written in one go on connections
  claimed before the clock (`before_clock`, `write_start`): the last of them is delayed only by
  the writes before it.
- Chaining. A session's next request is written the moment its answer has been read to its end
  (the `then` of `client.send`, called from the read callback), before anything else is done
  with that answer, when it is due at once (the core says which: `after`) and the core lets it
  take over the answer's turn (`Core.may_take_over`). It is written as bytes: messages encoded
  once each, the head made ahead. The session is then held (`_hold`) until a loop turn passes
  in which no answer ended (`_release`, one session a turn, at most `_HOLD_MAX_S`): when
  answers end together, every one of their next requests is out before the rest of any of them
  runs. (Not held when the socket took only part of the request: the rest goes out at the
  session's turn, which is then at once.) A request with a planned abort is not chained: its
  session may be held before reading its answer, and an abort is exact only when read at once.
- Deferral. Work no send waits for (making a session's next request ahead, building an answer's
  record, giving records to the sink: `later`) runs at quiet moments: once no answer came in
  for `_QUIET_S`, or once the oldest deferred work waited `_DEFER_MAX_S`, in passes of about
  `_SLICE_S`; a pass lets the sessions whose answers the pool has just read to their end
  (`Pool.ended`) go first, by one loop turn between two passes that work. An engine that
  batches ends many streams in the same few milliseconds; doing that work in between would
  delay every session of the burst still waiting for the loop.
"""

from __future__ import annotations

import asyncio
from collections import ChainMap, deque
from collections.abc import Callable
from typing import NamedTuple

from workloadlang.plan.model import PRequest
from workloadlang.run.client import send
from workloadlang.run.endpoint import ChatRequest, head_of, outgoing
from workloadlang.run.pacing import Core
from workloadlang.run.sse import Answer, Outcome
from workloadlang.wire import Outgoing, Pool, StartWrites

_QUIET_S = 0.003  # deferred work runs once no answer came in for this long...
_DEFER_MAX_S = 0.05  # ...or once the oldest deferred work is this old
_SLICE_S = 0.0005  # deferred work per loop pass (a long pass delays the answers behind it)
_HOLD_MAX_S = 0.02  # longest a session waits for answers ending after its own (`_release`)
_START_MADE = 256  # first requests made before the clock, at most (or the concurrency): a
# trace of 12,000 sessions is not all realised, nor held, before its first request


class Made(NamedTuple):
    """A request made ahead: as sent, and its bytes (maybe written already)."""

    chat: ChatRequest
    out: Outgoing


class WriteAhead:
    """The latency pacing (see the module)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.made: dict[str, Made] = {}  # made ahead of the send
        self.heads: dict[str, bytes] = {}  # heads made ahead of a request not made yet
        self.begun: set[str] = set()  # requests whose send has begun (`send`)
        self.waiting: list[PRequest] = []  # to make ahead at a quiet moment (`ahead`)
        self.deferred: deque[Callable[[], None]] = deque()  # `later` work, in order
        self.writes: StartWrites | None = None  # connections claimed for the start
        self.due = False  # a `_deferred` pass is scheduled
        self.last_answer = 0.0  # loop time the last answer came in
        self.ends_seen = 0  # `pool.ended` at the last `_deferred` pass
        self.yielded = False  # the last `_deferred` pass only yielded a loop turn
        self.since: float | None = None  # loop time the oldest deferred work was queued
        self.held: deque[tuple[float, asyncio.Future[None]]] = deque()  # `_hold`: since, future
        self.held_ends = 0  # `pool.ended` when `_release` last looked

    def bind(self, core: Core) -> None:
        self.core = core

    # ------------------------------------------------------------ the start

    async def before_clock(self, firsts: list[PRequest]) -> list[PRequest]:
        for req in firsts[:max(_START_MADE, self.core.concurrency)]:  # the rest at their turn
            self.prepare(req)
        url = self.core.endpoint.chat_url
        await self.pool.preconnect(url, min(len(self.made), self.core.concurrency))
        startable = [r for r in firsts if r.id in self.made and not (
            r.wait_before or r.phase or r.isolated or r.send_at)]
        # a phase starts at a barrier; an isolated request waits its turn; a request with a
        # planned send time waits for it
        if startable:
            self.writes = self.pool.claim(url, len(startable))
        return startable

    def write_start(self, reqs: list[PRequest], on_written: Callable[[PRequest], None]) -> None:
        writes, self.writes = self.writes, None
        if writes is None:
            return
        try:
            for req in reqs:
                if writes.write(self.made[req.id].out):
                    on_written(req)
        finally:
            writes.begin_reading()
            writes.close()

    # ------------------------------------------------------------ made ahead

    def prepare(self, req: PRequest) -> None:
        """Realise, encode and frame `req` now, when its messages are final; else realise its
        new text and make its head. With a time budget the deadline is what is left now (`send`
        shortens it for when it was written). One that cannot be made is made again at its
        send, where what goes wrong is recorded (this may run as a loop callback: nothing
        escapes)."""
        if req.id in self.made or req.id in self.begun:
            return
        maker, outcomes = self.core.maker, self.core.outcomes
        try:
            if not maker.ready(req, outcomes):
                maker.new_text(req, outcomes)
                self.heads[req.id] = head_of(self.core.endpoint, maker.shell(req))
                return
            chat = maker.chat(req, outcomes)
            self.made[req.id] = Made(chat, outgoing(self.core.endpoint, chat))
        except Exception:  # noqa: BLE001 (see above)
            return

    def ahead(self, req: PRequest) -> None:
        self.waiting.append(req)
        self._defer()

    # ------------------------------------------------------------ sending

    async def send(self, req: PRequest, after: PRequest | None,
                   on_cancel: Callable[[Outcome], None]) -> Outcome:
        chat, out = self._take(req)
        if after is not None and after.abort_after:
            after = None

        core = self.core
        outcome = await send(self.pool, core.endpoint, chat, out=out, clock=core.clock,
                             then=self._then(req, after) if after is not None else None,
                             on_cancel=on_cancel)
        self.last_answer = asyncio.get_running_loop().time()
        return outcome

    def _then(self, req: PRequest,
              after: PRequest) -> Callable[[Answer], asyncio.Future[None] | None]:
        """What the read callback of `req`'s answer does at its end: `after` written on its
        turn (`_chain`), and held only once its bytes are all out: the rest of a partial write
        is sent at its session's turn, and its TTFT counts from the first byte."""
        def then(answer: Answer) -> asyncio.Future[None] | None:
            chained = self._chain(req, after, answer)
            return self._hold() if chained and not self.made[after.id].out.rest else None
        return then

    def _take(self, req: PRequest) -> tuple[ChatRequest, Outgoing | None]:
        """Output: the request to send now, and its bytes when they were made ahead."""
        self.begun.add(req.id)
        self.heads.pop(req.id, None)
        made = self.made.pop(req.id, None)
        if made is None:
            return self.core.maker.chat(req, self.core.outcomes), None
        sent = made.out.sent_on(self.core.clock)  # what was left of a budget when it was sent
        return self.core.maker.sent_at(made.chat, sent[0] if sent else None), made.out

    def _chain(self, req: PRequest, after: PRequest, answer: Answer) -> bool:
        """Called the moment `req`'s answer has been read to its end, without error (its
        connection idle again): write `after` at once, on `req`'s turn, when the core lets it.
        Output: True when written (the core was told: `took_over`)."""
        core = self.core
        if not core.may_take_over(after):
            return False
        try:
            made = self.made.get(after.id)
            if made is not None:
                if not self.pool.write_now(made.out):
                    return False
            else:
                chat = core.maker.chat(after, ChainMap({req.id: answer}, core.outcomes))
                if not all(type(m) is bytes for m in chat.messages):
                    return False  # it carries another reply, not in yet
                out = outgoing(core.endpoint, chat, head=self.heads.pop(after.id, None))
                if not self.pool.write_now(out):
                    return False
                self.made[after.id] = Made(chat, out)
        except Exception:  # noqa: BLE001 (made again at its turn, where errors are recorded)
            return False
        core.took_over(after)
        return True

    def _hold(self) -> asyncio.Future[None]:
        """Output: a future that `_release` resolves, for a session whose next request `_chain`
        wrote and that has the rest of its answer to deal with (its outcome and record,
        reading its next answer)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self.held:
            self.held_ends = self.pool.ended
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
        ends = self.pool.ended
        if ends == self.held_ends or loop.time() - self.held[0][0] >= _HOLD_MAX_S:
            _, fut = self.held.popleft()
            if not fut.done():
                fut.set_result(None)
        self.held_ends = ends
        if self.held:
            loop.call_soon(self._release)

    def written_at(self, req: PRequest) -> tuple[float, float] | None:
        made = self.made.get(req.id)
        return made.out.sent_on(self.core.clock) if made is not None else None

    # ------------------------------------------------------------ deferred work

    def later(self, work: Callable[[], None]) -> None:
        self.deferred.append(work)
        self._defer()

    def flush(self) -> None:
        while self.deferred:
            self.deferred.popleft()()

    def end(self) -> None:
        self.waiting.clear()  # nothing is sent any more

    def _defer(self) -> None:
        """Make sure a `_deferred` pass is scheduled."""
        if self.due:
            return
        self.due = True
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.since is None:
            self.since = now
        loop.call_later(defer_wait(now, self.last_answer, self.since), self._deferred)

    def _deferred(self) -> None:
        """Loop callback: once quiet (no answer for `_QUIET_S`) or once the oldest deferred work
        waited `_DEFER_MAX_S`: make the next requests ahead, then the deferred work, for about
        `_SLICE_S`; the rest on the next pass (the same test again). A pass that finds answers
        read to their end since the last one does nothing but yield a loop turn (the steps of
        their sessions, queued by then, run first), unless the pass before it did."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait = defer_wait(now, self.last_answer, self.since or now)
        if wait:
            loop.call_later(wait, self._deferred)
            return
        ends = self.pool.ended
        if ends != self.ends_seen and not self.yielded:
            # answers ended since the last pass and their sessions' steps are queued on the
            # loop: one loop turn for them first (once between two passes that work, so that
            # answers ending all the time cannot starve the records)
            self.ends_seen, self.yielded = ends, True
            loop.call_soon(self._deferred)
            return
        self.ends_seen, self.yielded = ends, False
        until = now + _SLICE_S
        while self.waiting and loop.time() < until:
            self.prepare(self.waiting.pop(0))
        while self.deferred and loop.time() < until:
            self.deferred.popleft()()
        if self.deferred or self.waiting:
            loop.call_soon(self._deferred)
        else:
            self.due = False
            self.since = None


def defer_wait(now: float, last_answer: float, since: float) -> float:
    """Input: the time now, of the last answer and since deferred work waits (one clock).
    Output: seconds to wait before doing deferred work: 0 once no answer came in for `_QUIET_S`
    or once the work waited `_DEFER_MAX_S`, else until the sooner of the two."""
    return max(0.0, min(_QUIET_S - (now - last_answer), _DEFER_MAX_S - (now - since)))
