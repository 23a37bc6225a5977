"""A stretch timed alone measured again as a whole, once, when its first request (its anchor,
which nothing else repeats: agent-sim's finalize) ran at another speed than the requests after
it that price it.

Input: the plan, a session's stretch as it is answered (each request's kept outcome, after
`run.remeasure`), whether an outcome is a hit, and a way to send a request (again, with fresh
filler).
Output: the outcomes to keep for the stretch (the first's or the repeat's), the notes that say
so, and what it cost (`summary`, the results' `client`).

When: the anchor answered and is a hit, and the identical requests of its stretch
(`remeasure.twins_key`: agent-sim's baselines), at least `MIN_PACED` of them with a decode pace,
decoded by their median more than `ALLOWANCE` times faster or slower than the anchor, after
each was measured again: the machine ran at one speed for the anchor and at another for its
price, and neither can be moved to the other. A range priced across that drift is too wide to
judge, so the experiment is made again rather than judged. Still holding the isolation:
- the requests that pushed the anchor's context out (its `pressure`: the session's requests
  after the last one whose prompt the anchor's goes on from, before the anchor: agent-sim's
  sub-agents) are sent again with fresh filler of the same size (no records: `summary` counts
  them, and their tokens are with those of the sends not kept);
- the anchor and the rest of its stretch are sent again with fresh filler, each measured again
  as any request is (`Remeasure.settle`).
The repeat is kept when its anchor answered, is a hit too, and repeated the first's experiment:
a miss the first time is judged as it is (a second chance must never turn an eviction into a
hit); a context lost only the second time, under more pressure than planned (the first
stretch's requests and the pressure again), is said in the note while the planned experiment's
stretch is kept; and so is one whose anchor prefilled far faster than the first did at the
machine's speed (`easier_than`: its context came from a nearer tier, the pressure sent again
having pushed out other sessions' blocks rather than its own; a slow restore must never be
hidden by a second chance either). Once per session.
A stretch is measured again only in a run of one session (with others, the pressure that pushed
the context out was theirs too, and what their requests left in the cache cannot be sent
again), and only when every pressure request and the anchor can be sent again with fresh filler
(their last message is their own filler, which no request goes on from).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from workloadlang.plan.model import Plan, PRequest
from workloadlang.run.remeasure import ALLOWANCE, Remeasure, drift_of, resendable, twins_key
from workloadlang.run.sse import Outcome, prefill_time

MIN_PACED = 2  # identical requests with a decode pace, at least, to say the anchor drifted

Send = Callable[[PRequest], Awaitable[tuple[Outcome, Any] | str]]
"""Sends a request inside its session's isolation (its fresh filler already chosen): its outcome
(and how long it waited), or why it was not sent."""


@dataclass
class Held:
    """A session's stretch as answered so far: its requests in order (the anchor first) and
    their kept outcomes."""
    requests: list[PRequest]
    outcomes: list[Outcome]


def pressure(plan: Plan, anchor: PRequest) -> list[PRequest] | None:
    """Output: the requests that pushed `anchor`'s context out: its session's requests after
    the last one whose prompt `anchor`'s goes on from and before `anchor`, in plan order;
    None when there are none, or one of them is timed alone (then `anchor` is not the first
    of a stretch), or one of them or `anchor` cannot be sent again with fresh filler."""
    mine = plan.message_ids(anchor)
    session = [r for r in plan.requests if r.session == anchor.session]
    at = next(i for i, r in enumerate(session) if r.id == anchor.id)
    base = max((i for i, r in enumerate(session[:at])
                if (m := plan.message_ids(r)) and mine[:len(m)] == m), default=None)
    between = session[base + 1:at] if base is not None else []
    extended = extended_messages(plan)
    if not between or not resendable(plan, anchor, extended) \
            or not all(resendable(plan, r, extended) and not r.isolated for r in between):
        return None
    return between


def extended_messages(plan: Plan) -> set[int]:
    """Output: the messages some request's prompt goes on from."""
    out: set[int] = set()
    for r in plan.requests:
        out.update(plan.message_ids(r)[:-1])
    return out


def drifted(held: Held) -> str | None:
    """Output: why `held`'s anchor ran at another speed than its identical requests (see the
    module), or None."""
    anchor = held.outcomes[0]
    drifts = sorted(d for r, o in zip(held.requests[1:], held.outcomes[1:])
                    if twins_key(r) is not None and (d := drift_of(o, anchor)) is not None)
    if len(drifts) < MIN_PACED:
        return None
    median = drifts[len(drifts) // 2] if len(drifts) % 2 else \
        (drifts[len(drifts) // 2 - 1] + drifts[len(drifts) // 2]) / 2
    if 1 / ALLOWANCE <= median <= ALLOWANCE:
        return None
    way = f"{1 / median:.1f}x slower" if median < 1 else f"{median:.1f}x faster"
    return f"decoded {way} than the {len(drifts)} identical requests that price it"


def easier_than(first: Outcome, again: Outcome) -> str | None:
    """Output: why `again`, the anchor sent again, did not repeat `first`'s experiment, or None:
    it prefilled more than `ALLOWANCE` times faster than `first` would have at `again`'s speed:
    its context came from a faster place than the first time (a tier nearer the device: the
    pressure sent again pushed other blocks out instead), and a slow restore the first showed
    must not be hidden by it. `first`'s prefill is scaled by how much faster `again` decoded,
    never up: a decode slows far more than a prefill on a CPU shared with other work, so a
    machine that got slower is taken as no slower (`again` must then be faster outright). None
    too when either has no prefill time or decode pace."""
    p1, p2, scale = prefill_time(first)[0], prefill_time(again)[0], drift_of(again, first)
    if p1 is None or p2 is None or scale is None or p2 <= 0:
        return None
    expected = p1 * min(scale, 1.0)
    if expected <= ALLOWANCE * p2:
        return None
    return (f"prefilled {expected / p2:.1f}x faster than the first would have at its speed "
            f"({p2 * 1000:.1f} ms against {expected * 1000:.1f} ms)")


class Stretches:
    """The stretches of one run that may be measured again (see the module)."""

    def __init__(self, plan: Plan, again: Remeasure, hit: Callable[[PRequest, Outcome], bool],
                 send: Send, first: dict[str, str], outcomes: dict[str, Outcome],
                 enabled: bool = True) -> None:
        """`hit`: whether an outcome is a hit; `send`: sends a request again; `first`: each
        session's anchor (`Isolation.first`); `outcomes`: the run's kept outcomes, which hold
        the kept ones of a stretch measured again."""
        self.plan, self.again, self.hit, self.send = plan, again, hit, send
        self.first, self.outcomes = first, outcomes
        alone = len({r.session for r in plan.requests}) == 1  # its pressure all its own
        self.can = {r.id: p for r in plan.requests if enabled and alone and r.isolated
                    and (p := pressure(plan, r)) is not None}  # anchor id -> its pressure
        self.held: dict[str, Held] = {}  # session -> its stretch answered so far
        self.done: set[str] = set()  # sessions whose stretch was measured again
        self.repeats = 0  # stretches measured again
        self.kept = 0  # of them, those whose repeat was kept
        self.pressure_sent = 0  # pressure requests sent again

    async def answered(self, req: PRequest, o: Outcome, last: bool,
                       decides: bool) -> tuple[bool, list[tuple[PRequest, Outcome]]]:
        """`req` was answered with `o` (kept); `last`: no request timed alone follows it in
        its stretch; `decides`: a stop waits for its record. Output: whether `req`'s record is
        among those returned (else it is the caller's to keep), and the records to keep now,
        in order (a stretch that ended, measured again when it drifted; or one held till a
        request outside it came)."""
        anchor = self.first.get(req.session) if req.isolated else None
        if decides or not self.hold(req, o, anchor):
            return False, self.release(req.session)
        return True, await self.end(req.session) if last else []

    def hold(self, req: PRequest, o: Outcome, anchor: str | None) -> bool:
        """`req` of a stretch whose first request is `anchor` was answered with `o` (kept).
        Output: True when its record waits for the stretch's end (`end`)."""
        if req.session in self.done or o.error is not None:
            return False
        held = self.held.get(req.session)
        if req.id == anchor and anchor in self.can:
            self.held[req.session] = Held([req], [o])
            return True
        if held is None or held.requests[0].id != anchor:
            return False
        held.requests.append(req)
        held.outcomes.append(o)
        return True

    def release(self, session: str) -> list[tuple[PRequest, Outcome]]:
        """Output: the requests of `session`'s stretch held so far and their outcomes, in
        order; none are held any more."""
        held = self.held.pop(session, None)
        return list(zip(held.requests, held.outcomes)) if held else []

    def release_all(self) -> list[tuple[PRequest, Outcome]]:
        """Output: every held request (a run stopped in a stretch), session by session."""
        return [x for s in list(self.held) for x in self.release(s)]

    async def end(self, session: str) -> list[tuple[PRequest, Outcome]]:
        """`session`'s stretch ends (its isolation is still held). Output: its requests and the
        outcomes to keep, after measuring it again when it drifted (see the module); the run's
        `outcomes` hold the kept ones."""
        held = self.held.get(session)
        why = drifted(held) if held is not None and self.hit(held.requests[0],
                                                               held.outcomes[0]) else None
        if held is None or why is None:
            return self.release(session)
        self.done.add(session)
        self.repeats += 1
        anchor = held.requests[0]
        first = held.outcomes
        note = f"stretch measured again: {anchor.id} {why}"
        outcomes = self.outcomes
        again, stopped = await self._repeat(held)
        if stopped is not None:
            return self._keep(held, first, outcomes, f"{note}; {stopped}: the first kept",
                              aside=again)
        if again[0].error is not None or not self.hit(anchor, again[0]):
            lost = "failed" if again[0].error else \
                f"was not a hit (cached {again[0].cached_tokens} of {again[0].prompt_tokens})"
            return self._keep(held, first, outcomes, f"{note}; the second time it {lost}: "
                              "the first kept", aside=again)
        if (easier := easier_than(first[0], again[0])) is not None:
            return self._keep(held, first, outcomes, f"{note}; the second time it {easier}: "
                              "not the same experiment, the first kept", aside=again)
        self.kept += 1
        held.outcomes = again
        return self._keep(held, again, outcomes, f"{note}; the second kept", aside=first)

    async def _repeat(self, held: Held) -> tuple[list[Outcome], str | None]:
        """Send `held`'s pressure and stretch again (see the module). Output: the stretch's
        kept outcomes so far, and why it stopped before its end (a send not made: a stop of
        the run; a pressure request that failed), else None."""
        anchor = held.requests[0]
        for r in self.can[anchor.id]:
            got = await self._fresh(r)
            if isinstance(got, str):
                return [], got
            self.pressure_sent += 1
            self.again.count_aside(r.id, [got])  # the engine counted it: no record holds it
            if got.error is not None:
                return [], f"{r.id} failed when sent again ({got.error.kind})"
        self.again.begin_again(anchor.id, [r.id for r in held.requests])
        out: list[Outcome] = []
        for r in held.requests:
            got = await self._fresh(r)
            if isinstance(got, str):
                return out, got
            kept = got if r is anchor else await self.again.settle(
                r, got, self.outcomes, self.first, partial(self.send, r))  # as any request
            self.outcomes[r.id] = kept  # the anchor of the requests after it
            out.append(kept)
        return out, None

    async def _fresh(self, r: PRequest) -> Outcome | str:
        """Output: `r` sent again with fresh filler (its next try's), or why not."""
        self.again.tries[r.id] = self.again.next_try(r.id)
        t0 = self.again.clock()
        try:
            got = await self.send(r)
            return got if isinstance(got, str) else got[0]
        finally:
            self.again.tries.pop(r.id, None)
            self.again.retries += 1  # a send more, with those of measuring again
            self.again.spent += self.again.clock() - t0

    def _keep(self, held: Held, kept: Sequence[Outcome], outcomes: dict[str, Outcome],
              note: str, aside: Sequence[Outcome] = ()) -> list[tuple[PRequest, Outcome]]:
        """Output: `held`'s requests with `kept`, noted; `aside` (the other round's outcomes)
        counted as sends not kept."""
        self.held.pop(held.requests[0].session, None)
        for i, (r, o) in enumerate(zip(held.requests, kept)):
            outcomes[r.id] = o
            self.again.set_aside(r.id, aside[i] if i < len(aside) else None,
                                 note if i == 0 else f"sent again with its stretch ({note})")
        return list(zip(held.requests, kept))

    def summary(self) -> dict[str, Any]:
        """Output: the results' `client` fields of stretches measured again: how many, of them
        how many kept, and the pressure requests sent again (their tokens are with those of
        the sends not kept, `Remeasure.summary`)."""
        if not self.repeats:
            return {}
        return {"stretches_again": self.repeats, "stretches_again_kept": self.kept,
                "pressure_again": self.pressure_sent}
