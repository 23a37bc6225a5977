"""Measured again alone: a decisive measurement that the experiment can repeat is repeated
rather than judged on what it could not tell.

Input: the plan (which requests can be measured again), each isolated request's outcome as it
comes, the outcome of the first request of its stretch timed alone (its anchor: in agent-sim
the finalize, which nothing can repeat), the clock and a way to send the request again.
Output: the outcome to keep, and per request why it was measured again (`notes`, the records'
`remeasured`), and what it cost (`summary`, the results' `client`).

A request timed alone (`isolated`) after the first of its stretch is a reference measurement
(a re-read of a context the stretch has read, a fork of it with a suffix of its own) and can be
measured again while its session still holds the isolation: a probe as it is (its context is
cached either way), a request whose own new turn is filler with fresh filler of the same size
(its first send cached that text, so sending it again would measure a hit). It is measured
again, at most `TRIES - 1` more times, when
- its first token's stamp may be late (`Outcome.ttft_late_s`) and its prefill time is that
  TTFT (no engine prefill time): its time is a range, not a number;
- it decoded more than `ALLOWANCE` times slower per token than its anchor (the engine's own
  decode time when it reports one, else the client's, over at least `MIN_DECODE` tokens and
  `MIN_DECODE_S`): the machine ran slower than when the anchor ran, and its time would price
  the anchor at another speed than the anchor's. A pause first (`PAUSES`), so a drift of a
  while can pass;
- it is one of identical requests of its stretch that prefill tokens of their own (the same
  label, prompt and new tokens, at least `MIN_OWN` of them: agent-sim's baselines) and its
  prefill time, plus what a timing resolves (`floors`), is more than `ALLOWANCE` times that
  of the fastest of them kept before it, neither having drifted: the same work at two speeds,
  the machine's speed moved within the stretch in a way the decode pace did not show (a CPU
  shared with other work slows a long prefill and a short decode unequally). Of identical
  requests the fastest counts (noise only adds time), and it counts when another confirms it
  (`noise`); a pause first, as for a drift, so this one may.
The last try is kept, unless it decoded more than `ALLOWANCE` times off its anchor's pace and an
earlier try decoded nearer to it: then that one is (`closest`), its time taken nearer the speed
the anchor's was. A try that failed is kept only when every one did. The tries not kept are in
its note.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from workloadlang.noise import MIN_OWN, steady
from workloadlang.plan.model import Plan, PRequest
from workloadlang.results import DRIFT_ALLOWANCE
from workloadlang.run.sse import Outcome, prefill_time

TRIES = 3  # sends of a request at most, the first included
ALLOWANCE = DRIFT_ALLOWANCE  # decode paces within this factor are the same machine's
MIN_DECODE = 4  # tokens decoded, at least, for a decode pace
MIN_DECODE_S = 0.005  # and seconds of decoding: shorter, a timer's noise is most of it
PAUSES = (0.25, 1.0)  # before each try again after a drift, seconds


def twins_key(req: PRequest) -> tuple[str, str, int, int] | None:
    """Output: what identical requests of one session share (label, prompt and new tokens),
    or None for a request with under `MIN_OWN` tokens of its own to prefill."""
    if req.new_tokens < MIN_OWN:
        return None
    return req.session, req.label, req.prompt_tokens, req.new_tokens


def decode_pace(o: Outcome | None) -> float | None:
    """Output: seconds per decoded token after the first: the engine's own decode time when it
    reports one (llama.cpp `timings.predicted_ms` over `predicted_n`), else the client's time
    from the first token to the end; None for an error, or under `MIN_DECODE` tokens or
    `MIN_DECODE_S` of decoding."""
    if o is None or o.error is not None:
        return None
    t = o.timings or {}
    n, ms = t.get("predicted_n"), t.get("predicted_ms")
    if isinstance(n, (int, float)) and isinstance(ms, (int, float)) and n >= MIN_DECODE \
            and ms >= MIN_DECODE_S * 1000:
        return ms / 1000 / (n - 1)
    n = o.completion_tokens if o.completion_tokens is not None else o.streamed_tokens
    if n is None or n < MIN_DECODE or o.ttft_s is None or o.e2e_s - o.ttft_s < MIN_DECODE_S:
        return None
    return (o.e2e_s - o.ttft_s) / (n - 1)


def drift_of(o: Outcome | None, anchor: Outcome | None) -> float | None:
    """Output: how many times slower `o` decoded per token than `anchor` (below 1: faster);
    None when either has no decode pace."""
    a, b = decode_pace(anchor), decode_pace(o)
    return None if a is None or b is None else b / a


def why_again(o: Outcome, anchor: Outcome | None, twins: Sequence[Outcome] = (),
              floors: tuple[float, float] = (0.005, 0.005)) -> tuple[str, float] | None:
    """Output: why a request that can be measured again should be, and the pause before it
    (seconds), or None. `twins`: the identical requests of its stretch kept before it;
    `floors`: what a timing resolves over the client's TTFT and over the engine's own prefill
    time (seconds). See the module."""
    if o.error is not None:
        return None
    if o.ttft_late_s and o.server_prefill_ms is None:
        return f"first-token stamp up to {o.ttft_late_s * 1000:.1f} ms late", 0.0
    drift = drift_of(o, anchor)
    if drift is not None and drift > ALLOWANCE:
        return f"decoded {drift:.1f}x slower than {anchor.id if anchor else '?'}", 1.0
    off = apart(o, twins, anchor, floors)
    if off is not None:
        return f"prefilled the same work {off[0]:.1f}x slower than {off[1]}", 1.0
    return None


def apart(o: Outcome, twins: Sequence[Outcome], anchor: Outcome | None,
          floors: tuple[float, float]) -> tuple[float, str] | None:
    """Output: how many times slower `o`'s prefill time (plus its floor) is than that of the
    fastest identical request kept before it, and that one's id, when more than `ALLOWANCE`;
    None when within it, or none is faster. Neither may have drifted from `anchor`: a drift is
    measured again and read for itself."""
    def paced(x: Outcome) -> float | None:
        t = None if x.error is not None else prefill_time(x)[0]
        if t is None or not steady(drift_of(x, anchor)):
            return None
        return t + floors[x.server_prefill_ms is not None]

    mine = paced(o)
    kept = [(t, x.id) for x in twins if (t := paced(x)) is not None and t > 0]
    if mine is None or not kept:
        return None
    fastest, twin = min(kept)
    return (mine / fastest, twin) if mine > ALLOWANCE * fastest else None


def repeatable(plan: Plan) -> frozenset[str]:
    """Output: the isolated requests that can be measured again (see the module): probes, and
    requests whose last message is their own turn of filler only that no other request's
    prompt goes on from."""
    iso = [r for r in plan.requests if r.isolated]
    if not iso:
        return frozenset()
    extended: set[int] = set()  # messages some request's prompt goes on from
    for r in plan.requests:
        extended.update(plan.message_ids(r)[:-1])
    return frozenset(r.id for r in iso if r.kind == "probe" or resendable(plan, r, extended))


def resendable(plan: Plan, r: PRequest, extended: Collection[int]) -> bool:
    """Output: True when `r` can be sent again with fresh filler and measure the same work: a
    reply whose last message is its own turn of filler only, which no request's prompt goes on
    from (`extended`: the messages some prompt goes on from)."""
    return r.kind == "reply" and r.last_message is not None and r.new_tokens > 0 \
        and r.last_message not in extended and own_filler(plan, r)


def own_filler(plan: Plan, r: PRequest) -> bool:
    """Output: True when `r`'s last message is a user message of filler only."""
    m = plan.messages[r.last_message] if r.last_message is not None else None
    return m is not None and m.role == "user" and bool(m.segs) \
        and all(s.kind == "filler" for s in m.segs)


class Remeasure:
    """The measuring again of one run (see the module). `tries`: request id -> the try being
    made (the request maker makes fresh filler for tries after the first)."""

    def __init__(self, plan: Plan, clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 enabled: bool = True, floors: tuple[float, float] = (0.005, 0.005)) -> None:
        self.can = repeatable(plan) if enabled else frozenset()
        self.floors = floors  # what a timing resolves: the client's TTFT, the engine's prefill
        # (anchor id, `twins_key`) -> the identical requests of that stretch kept so far
        self.twins: dict[tuple[str, tuple[str, str, int, int]], list[Outcome]] = {}
        self.clock, self.sleep = clock, sleep
        self.tries: dict[str, int] = {}
        self.notes: dict[str, list[str]] = {}
        self.anchors: dict[str, str] = {}  # request id -> the first request of its stretch
        # request id -> the prompt and cached tokens the engine counted for its tries not kept
        self.earlier: dict[str, tuple[int, int]] = {}
        self.sends: dict[str, int] = {}  # request id -> its sends, when more than one
        self.used: dict[str, int] = {}  # request id -> the last try whose filler it was sent with
        self.before: dict[str, int] = {}  # request id -> its sends before its stretch's repeat
        self.spent = 0.0  # seconds of measuring again, pauses included
        self.retries = 0  # tries again begun

    async def settle(self, req: PRequest, o: Outcome, outcomes: Mapping[str, Outcome],
                     first: Mapping[str, str],
                     send: Callable[[], Awaitable[tuple[Outcome, Any] | str]]) -> Outcome:
        """Output: the outcome to keep for `req` (answered with `o`): `o`, or that of a try
        again (the last, or the one `closest` to its anchor's pace). `send` sends `req` again,
        its outcome first, or says why it was not: a stop of the run; its session still holds
        the isolation. `outcomes`: the run's so far; `first`: session -> the first request of
        its stretch timed alone (`Isolation.first`), whose outcome is `req`'s anchor."""
        anchor = outcomes.get(first.get(req.session, "")) if req.isolated else None
        if anchor is None or anchor.id == req.id:
            return o
        self.anchors[req.id] = anchor.id
        if req.id not in self.can:
            return o
        key = twins_key(req)
        twins = self.twins.setdefault((anchor.id, key), []) if key is not None else []
        tried = [o]
        for k in range(1, TRIES):
            why = why_again(o, anchor, twins, self.floors)
            if why is None:
                break
            t0 = self.clock()
            self.notes.setdefault(req.id, []).append(f"try {k}: {why[0]}{timing(o)}")
            if why[1]:
                await self.sleep(PAUSES[min(k - 1, len(PAUSES) - 1)])
            self.tries[req.id] = self.next_try(req.id)
            self.retries += 1
            got = await send()
            self.spent += self.clock() - t0
            if isinstance(got, str):  # a stop came (the time budget ran out): keep what is in
                break
            o = got[0]
            tried.append(o)
        self.tries.pop(req.id, None)
        kept = closest(tried, anchor)  # the last, or one timed nearer the anchor's speed
        if len(tried) > 1 or req.id in self.before:
            self.sends[req.id] = self.before.get(req.id, 0) + len(tried)
            self.count_aside(req.id, [x for x in tried if x is not kept])
        if kept is not o:
            b = self.before.get(req.id, 0)  # sends of its stretch's first round
            self.notes[req.id].append(
                f"kept send {b + tried.index(kept) + 1} of {b + len(tried)}: decoded nearest "
                f"{anchor.id}'s pace; the last {last_try(o, anchor)}")
        if key is not None:
            twins.append(kept)
        return kept

    def next_try(self, rid: str) -> int:
        """Output: the try whose fresh filler `rid` is sent with next (each try's is its own:
        an engine that cached an earlier try's text has none of this one's)."""
        self.used[rid] = self.used.get(rid, 0) + 1
        return self.used[rid]

    def begin_again(self, anchor: str, ids: Sequence[str]) -> None:
        """The stretch of `anchor` (its requests `ids`, the anchor first) is measured again
        (`run.stretch`): its identical requests are compared anew, and each request's sends so
        far are counted before those to come."""
        for key in [k for k in self.twins if k[0] == anchor]:
            del self.twins[key]
        for rid in ids:
            self.before[rid] = self.sends.get(rid, 1)

    def set_aside(self, rid: str, other: Outcome | None, note: str) -> None:
        """`rid`'s stretch was measured again (`run.stretch`): `other`, the outcome of the round
        not kept (None: that round did not reach it), counts as a send not kept; `note` says
        what was done."""
        self.sends[rid] = max(self.sends.get(rid, 1), self.before.get(rid, 1) + 1)
        self.count_aside(rid, [other] if other is not None else [])
        self.notes.setdefault(rid, []).append(note)

    def count_aside(self, rid: str, aside: Sequence[Outcome]) -> None:
        """The prompt and cached tokens the engine counted for `aside`, sends of `rid` not
        kept, are added to its `earlier`."""
        p, c = self.earlier.get(rid, (0, 0))
        self.earlier[rid] = (p + sum(x.prompt_tokens or 0 for x in aside),
                             c + sum(x.cached_tokens or 0 for x in aside))

    def summary(self) -> dict[str, Any]:
        """Output: the results' `client` fields of measuring again: requests measured again, the
        extra sends, and the seconds they took (pauses included); when a send was not kept,
        the prompt and cached tokens the engine counted for those sends."""
        out: dict[str, Any] = {"remeasured_requests": len(self.notes),
                               "remeasures": self.retries,
                               "remeasure_s": round(self.spent, 6)}
        if self.earlier:  # what the engine counted for the sends not kept
            out["remeasure_prompt_tokens"] = sum(p for p, _ in self.earlier.values())
            out["remeasure_cached_tokens"] = sum(c for _, c in self.earlier.values())
        return out


def closest(tried: Sequence[Outcome], anchor: Outcome) -> Outcome:
    """Output: of a request's tries (its first send first), the one to keep: the last without
    an error (the last of all when every one failed), unless its decode pace is more than
    `ALLOWANCE` times off `anchor`'s (either way) and an earlier try's is nearer to it (by
    ratio); then the nearest of those."""
    def off(x: Outcome) -> float | None:
        d = drift_of(x, anchor)
        return None if d is None or d <= 0 else max(d, 1 / d)

    ok = [x for x in tried if x.error is None]
    if not ok:
        return tried[-1]
    last = off(ok[-1])
    if last is None or last <= ALLOWANCE:
        return ok[-1]
    known = [(d, i) for i, x in enumerate(ok[:-1]) if (d := off(x)) is not None and d < last]
    return ok[min(known)[1]] if known else ok[-1]


def last_try(o: Outcome, anchor: Outcome) -> str:
    """Output: what a last try not kept did, as a note says it: `decoded 2.9x slower (TTFT
    ...)`, `decoded 3.0x faster (...)`, `failed (http)`."""
    if o.error is not None:
        return f"failed ({o.error.kind})"
    d = drift_of(o, anchor)
    if not d:
        return f"decoded at an unknown pace{timing(o)}"
    return f"decoded {d:.1f}x {'slower' if d >= 1 else 'faster'}{timing(o)}"


def timing(o: Outcome) -> str:
    """Output: `o`'s times as a note gives them: ` (TTFT 12.3 ms, prefill 10.1 ms)`."""
    bits = [] if o.ttft_s is None else [f"TTFT {o.ttft_s * 1000:.1f} ms"]
    if o.server_prefill_ms is not None:
        bits.append(f"prefill {o.server_prefill_ms:.1f} ms")
    pace = decode_pace(o)
    if pace is not None:
        bits.append(f"decode {pace * 1000:.3f} ms/token")
    return f" ({', '.join(bits)})" if bits else ""
