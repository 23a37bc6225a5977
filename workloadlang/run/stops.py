"""What stops requests from being sent: the plan's stops and the run's.

Input: the plan, each record as it is kept (`update`), the clock and the run's start (`t0`),
and `sleep` (which waits on the clock).
Output: for a request about to go, why it is not sent (`reason`, None: send it); whether a
request's record may decide what is sent next (`decides`: then it is made at once, not at a
quiet moment); why the run is incomplete (`incomplete`).

- `until` loops skip their remaining iterations once the condition is seen;
- fail-fast (a workload option) stops every session at the first miss;
- a resend of a request that failed is not sent (it would measure nothing about retention);
- `max_errors` errors in a row stop the run, and so does its time budget (no wait outlasts it:
  `sleep_until`; what it kept from being sent is recorded as not sent);
- nothing is sent once the run's `duration` is over (nor a request due after it): the
  requests left are skipped, and the run is complete all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from workloadlang.plan.model import Plan, PRequest
from workloadlang.results import Record


class Stops:
    """The stops of one run (see the module)."""

    def __init__(self, plan: Plan, clock: Callable[[], float], *,
                 time_budget_s: float | None = None, max_errors: int = 10,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        self.plan, self.clock, self.sleep = plan, clock, sleep
        self.time_budget_s, self.max_errors = time_budget_s, max_errors
        self.duration_s = plan.duration_s
        self.t0 = 0.0
        self.stop_all: str | None = None
        self.stopped: dict[str, int] = {}  # `until` group -> the iteration it was seen in
        self.errors_in_row = 0
        self.resent = {r.prefix_source for r in plan.requests if r.kind == "resend"}

    def reason(self, req: PRequest, records: Mapping[str, Record],
               due: float | None = None) -> str | None:
        """Output: why `req` (due at `due` on the clock, or now) is not sent, or None. Counts
        the time budget out."""
        if self.stop_all:
            return self.stop_all
        if self.duration_s is not None and max(due or 0.0, self.clock()) - self.t0 >= \
                self.duration_s:
            return f"due after the run's duration ({self.duration_s:g}s)"
        if req.stop_group and self.stopped.get(req.stop_group, 1 << 30) < (req.stop_iter or 0):
            return f"`until {req.stop_on}` reached in an earlier iteration"
        src = records.get(req.prefix_source or "")
        if req.kind == "resend" and src is not None and (src.error or src.skipped):
            # Re-sending a prompt that never reached the engine measures nothing about retention.
            return f"the request it re-sends ({src.id}) failed"
        if self.time_budget_s and self.clock() - self.t0 >= self.time_budget_s:
            self.stop_all = "time budget exhausted"
            return self.stop_all
        return None

    async def sleep_until(self, at: float) -> None:
        """Sleep (`sleep`) until `at` on the clock, or until the time budget ends if that is
        sooner: no wait for a request's time (`wait`, an arrival, a trace record's time)
        outlasts the run's budget."""
        until = min(at, self.t0 + self.time_budget_s) if self.time_budget_s else at
        while (left := until - self.clock()) > 0:
            await self.sleep(left)

    def decides(self, req: PRequest) -> bool:
        """Output: True when `req`'s record, whatever it says, may decide what is sent next:
        an `until` loop, fail-fast, a resend of it."""
        return bool(req.stop_group) or self.plan.fail_fast or req.id in self.resent

    def update(self, req: PRequest, rec: Record) -> None:
        """Take what `rec` (of `req`) says into account."""
        if rec.skipped:
            return
        self.errors_in_row = self.errors_in_row + 1 if rec.error else 0
        if self.errors_in_row >= self.max_errors and not self.stop_all:
            self.stop_all = f"too many errors ({self.errors_in_row} in a row)"
        if req.stop_group and stop_condition(req.stop_on, rec):
            self.stopped.setdefault(req.stop_group, req.stop_iter or 0)
        if self.plan.fail_fast and rec.hit is False and not self.stop_all:
            self.stop_all = f"fail-fast: miss at {rec.id}"

    def incomplete(self, records: Iterable[Record]) -> str | None:
        """Output: why the run is incomplete (a stop of the run's, an interruption, nothing
        measured), or None."""
        if self.stop_all and not self.stop_all.startswith("fail-fast"):
            return self.stop_all
        records = list(records)
        if any(r.skipped == "not run (interrupted)" for r in records):
            return "interrupted"
        sent = [r for r in records if not r.skipped]
        if sent and all(r.error is not None for r in sent):
            # Nothing was measured: not a pass, even when no gate reads the errors.
            return f"every request failed ({len(sent)} errors)"
        return None


def stop_condition(on: str | None, rec: Record) -> bool:
    if on == "miss":
        return rec.hit is False
    if on == "hit":
        return rec.hit is True
    return on == "error" and rec.error is not None
