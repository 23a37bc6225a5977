"""Planned requests made into chat requests: their text realised, their headers, their deadline.

Input: the plan's requests, the realiser (text sized for this engine), the endpoint, the
replies of earlier requests, the workload's timeout and the run's time budget. Output:
`ChatRequest`s (`chat`), whether one can be made yet (`ready`: every reply it carries is in),
and before the clock, every filler sized with the engine's tokenizer (`size_all`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workloadlang.plan.model import PRequest
from workloadlang.plan.realise import Realiser
from workloadlang.results import Sink
from workloadlang.run.endpoint import ChatRequest, Endpoint, dumps_kept
from workloadlang.run.errors import EndpointError

_SIZING_PARALLEL = 32  # tokenizer calls at once while sizing, before the clock


class RequestMaker:
    """Makes the chat requests of one run. `t0` is the run's start (set by the executor)."""

    def __init__(self, realiser: Realiser, endpoint: Endpoint, clock: Callable[[], float], *,
                 timeout_s: float, time_budget_s: float | None = None,
                 tries: Mapping[str, int] | None = None) -> None:
        self.realiser, self.endpoint, self.clock = realiser, endpoint, clock
        self.timeout_s, self.time_budget_s = timeout_s, time_budget_s
        self.tries = tries if tries is not None else {}  # measured again: request id -> try
        self.t0 = 0.0
        self.sizing_failed = False

    def ready(self, req: PRequest, replies: Mapping[str, Any]) -> bool:
        """Output: True when every reply `req` carries is in `replies`."""
        return self.realiser.can_realise(req, replies)

    def new_text(self, req: PRequest, replies: Mapping[str, Any]) -> None:
        """Realise and encode what of `req` does not wait for a reply (its new turn); nothing
        while a `keep` it goes on from waits for branches still in flight (deciding it now
        would pass them over)."""
        self.realiser.encoded(req, replies, dumps_kept, force=False)

    def chat(self, req: PRequest, replies: Mapping[str, Any],
             at: float | None = None) -> ChatRequest:
        """Output: `req` as sent, its messages carrying `replies`, its deadline what is left now
        (or at `at`: see `deadline`). Not re-validated: every field comes from the checked plan
        and the realiser (validating the messages copied each of them, on the path from an
        answer to the next send)."""
        k = self.tries.get(req.id)
        messages: list[dict[str, Any] | bytes] = [*self.realiser.again(req, replies, k)] if k \
            else self.realiser.encoded(req, replies, dumps_kept)
        return ChatRequest.model_construct(
            id=req.id, messages=messages,
            max_tokens=req.max_tokens, options=req.options, abort_after=req.abort_after,
            headers=headers(req), **self.deadline(at))

    def shell(self, req: PRequest) -> ChatRequest:
        """Output: `req` without its messages: what its HTTP head is made from."""
        return ChatRequest.model_construct(
            id=req.id, messages=[], max_tokens=req.max_tokens, options=req.options,
            abort_after=req.abort_after, headers=headers(req), **self.deadline())

    def sent_at(self, chat: ChatRequest, at: float | None) -> ChatRequest:
        """Output: `chat` (made earlier) with the deadline of a request sent at `at` (None:
        now)."""
        return chat.model_copy(update=self.deadline(at)) if self.time_budget_s else chat

    def deadline(self, at: float | None = None) -> dict[str, Any]:
        """Output: a request's `deadline_s` made now, or for a request sent already at `at`
        (on `clock`: its deadline counts from then) — the workload's timeout, or what is left
        of the run's time budget when that is less (then `budget_cut`)."""
        if not self.time_budget_s:
            return {"deadline_s": self.timeout_s, "budget_cut": False}
        now = self.clock() if at is None else at
        left = self.time_budget_s - (now - self.t0 if self.t0 else 0.0)
        deadline = max(0.001, min(self.timeout_s, left))
        return {"deadline_s": deadline, "budget_cut": deadline < self.timeout_s}

    async def size_all(self, sessions: Iterable[list[PRequest]], sink: Sink) -> None:
        """Before the clock: size every request's fillers with the engine's tokenizer; sessions
        side by side (at most `_SIZING_PARALLEL` calls at once), a session's requests in order
        (a filler they share is sized once). If the tokenizer stops working, say so once and
        size the rest by the calibrated ratio (the run goes on)."""
        limit = asyncio.Semaphore(_SIZING_PARALLEL)
        sessions = list(sessions)
        progress = Progress(sink, self.clock, sum(len(s) for s in sessions))

        async def session(reqs: list[PRequest]) -> None:
            for req in reqs:
                async with limit:
                    await self._prepare(req, sink)
                progress.step()

        await asyncio.gather(*(session(s) for s in sessions))
        progress.end()

    async def _prepare(self, req: PRequest, sink: Sink) -> None:
        if self.sizing_failed:
            return
        try:
            await self.realiser.prepare(req)
        except EndpointError as e:
            if self.sizing_failed:  # another session saw it first
                return
            self.sizing_failed = True
            sink.event("note", {"message": f"the engine's tokenizer failed ({e}); text not "
                                "sized yet is sized by the calibrated tokens-per-word ratio"})


class Progress:
    """What the run is doing while it sizes the requests' text before the clock (a long trace
    takes a while): a note on the sink once it has taken `FIRST_S`, again every `EVERY_S`, and
    when it is done (when a note was given). Each note's data has `preparing`: (done, total)."""

    FIRST_S = 1.0
    EVERY_S = 5.0

    def __init__(self, sink: Sink, clock: Callable[[], float], total: int) -> None:
        self.sink, self.clock, self.total = sink, clock, total
        self.start = self.last = clock()
        self.done, self.said = 0, False

    def step(self) -> None:
        """One more request's text is sized."""
        self.done += 1
        now = self.clock()
        if self.done < self.total and now - self.last >= (self.EVERY_S if self.said
                                                          else self.FIRST_S):
            first = (f"preparing the text of {self.total:,} requests before the clock starts "
                     f"(sizing it with the engine's tokenizer): {self.done:,} done")
            later = f"preparing the text: {self.done:,} of {self.total:,} requests done"
            self.sink.event("note", {
                "message": f"{later if self.said else first} in {now - self.start:.1f} s",
                "preparing": [self.done, self.total]})
            self.last, self.said = now, True

    def end(self) -> None:
        if self.said:
            self.sink.event("note", {
                "message": f"the text of {self.total:,} requests is ready (sized in "
                           f"{self.clock() - self.start:.1f} s): the run starts",
                "preparing": [self.total, self.total]})


def by_session(requests: Iterable[PRequest]) -> list[list[PRequest]]:
    """Output: `requests` grouped by session, each group in order (what `size_all` takes)."""
    sessions: dict[str, list[PRequest]] = {}
    for r in requests:
        sessions.setdefault(r.session, []).append(r)
    return list(sessions.values())


def headers(req: PRequest) -> dict[str, str]:
    """Output: the headers that tie a request to the plan (a log, the simulator's faults)."""
    return {"X-WL-Session": req.session, "X-WL-Request": req.id}
