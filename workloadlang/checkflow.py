"""The checks of what a session's statements do in order, a part of the checker
(`workloadlang.check`): what the source alone shows about a session's conversation and its
waits, so that `wl check` finds it and not only `wl plan`.

Input: each `ir.Session`'s statements of the checker's workload (`FlowChecks`, given the
`checkexpr.Checker`). Output: the checker's diagnostics:

- WL430: a `tool` message that answers no call whatever the params: on its first run no call of
  the conversation's last assistant turn can be left unanswered (`Pending`: how many calls may
  be, at least and at most, over every way the loops and `if`s go);
- WL431: `keep INDEX` beyond a spawn's count, both written as numbers;
- WL410: no session sends any request (no `reply`, `probe`, `resend` or trace);
- WL236 (warning): a `wait` with no request of its session after it in its phase (it is counted
  after the phase's barrier, before the session's next request) or in its session at all (it
  does nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

from workloadlang import ir
from workloadlang.checkexpr import Checker
from workloadlang.diagnostics import warning
from workloadlang.evaluate import constant

MANY = 1 << 30
"""More calls than any conversation holds: the upper end of `Pending` once a loop may add any
number."""
REQUESTS = (ir.Reply, ir.Probe, ir.Resend)
LOOPS = (ir.For, ir.Repeat, ir.Grow, ir.Spawn)


@dataclass(frozen=True)
class Pending:
    """The tool calls of a conversation's last assistant turn that no `tool` message answered
    yet: at least `low`, at most `high`, over every way the statements before may go."""

    low: int = 0
    high: int = 0

    def join(self, other: Pending) -> Pending:
        return Pending(min(self.low, other.low), max(self.high, other.high))

    def answered(self) -> Pending:
        return Pending(max(0, self.low - 1), self.high if self.high >= MANY else self.high - 1)


class FlowChecks:
    """The flow checks (see the module), adding to the diagnostics of `checker`."""

    def __init__(self, checker: Checker) -> None:
        self.c = checker

    def check_flow(self) -> None:
        """Every session's tool results, `keep` indexes and waits; WL410 when no session sends
        anything."""
        for s in self.c.wl.sessions:
            self.calls(s.body, Pending(), report=True)
            self.keeps(s.body)
            self.waits(s)
        if self.c.wl.sessions and not any(
                s.trace is not None or any(isinstance(st, REQUESTS) for st in _all(s.body))
                for s in self.c.wl.sessions):
            self.c.err("WL410", "no session sends a request: a conversation is sent by `reply`, "
                     "`probe` or `resend`", self.c.wl.sessions[0].span,
                     "end a turn with `reply N` (or `probe`) to send the messages before it")

    # -- tool results

    def calls(self, body: Iterable[Any], state: Pending, report: bool) -> Pending:
        """Input: statements and the calls pending before them; `report`: the statements run
        for the first time here (an error found then is certain). Output: the calls pending
        after them."""
        for s in body:
            state = self.call_step(s, state, report)
        return state

    def call_step(self, s: Any, state: Pending, report: bool) -> Pending:
        if isinstance(s, ir.Message):
            if s.role == "assistant":
                n = sum(isinstance(p, ir.CallPart) for p in s.parts)
                return Pending(n, n)
            if s.role != "tool":
                return state
            if state.high == 0:
                if report:
                    self.c.err("WL430", "this `tool` message answers no tool call: no call of the "
                             "conversation's last assistant turn can be left unanswered here",
                             s.span, "a `tool` message follows `assistant call NAME { ... }` or "
                             "`reply N call NAME { ... }`, one per call")
                return state
            return state.answered()
        if isinstance(s, ir.Reply):
            return state if s.mode == "drop" else Pending(len(s.calls), len(s.calls))
        if isinstance(s, (ir.Turn, ir.Phase)):
            return self.calls(s.body, state, report)
        if isinstance(s, ir.If):
            return self.calls(s.then, state, report).join(self.calls(s.orelse, state, report))
        if isinstance(s, ir.Fresh):
            self.calls(s.body, Pending(), report)
            return state
        if isinstance(s, ir.Spawn):
            return self.spawn_calls(s, state, report)
        if isinstance(s, LOOPS):
            return self.loop_calls(s.body, state, report)
        return state

    def spawn_calls(self, s: ir.Spawn, state: Pending, report: bool) -> Pending:
        """Each branch starts from the parent's calls (`fork`) or none (`cold`); the parent
        goes on with its own, or with a kept branch's."""
        end = self.calls(s.body, state if s.mode == "fork" else Pending(), report)
        return state.join(end) if s.keep is not None else state

    def loop_calls(self, body: tuple, state: Pending, report: bool) -> Pending:
        """A loop body runs 0 or more times: the first run from `state` (reported), the later
        ones from whatever the runs before left, until that no longer changes."""
        seen = state
        end = self.calls(body, state, report)
        for _ in range(8):
            nxt = seen.join(end)
            if nxt == seen:
                return seen
            seen = nxt
            end = self.calls(body, seen, False)
        return Pending(min(seen.low, end.low), MANY)

    # -- keep

    def keeps(self, body: tuple) -> None:
        """WL431 for `keep INDEX` at or past the spawn's count, both written as numbers."""
        for s in _all(body):
            if not isinstance(s, ir.Spawn) or s.keep is None or s.keep.rule != "index":
                continue
            k, n = constant(s.keep.index), constant(s.count)
            if _whole(k) and _whole(n) and k >= n:
                self.c.err("WL431", f"`keep {k:g}` names no branch: the spawn has {n:g} (0 to "
                         f"{n - 1:g})", s.keep.span)

    # -- waits

    def waits(self, s: ir.Session) -> None:
        """WL236 for each `wait` no request of the session follows: in its phase, or at all."""
        for wait, phase in trailing_waits(s.body):
            if phase is None:
                self.c.diags.append(warning(
                    "WL236", f"this `wait` is the last thing session `{s.name}` does: no "
                    "request follows it, so it waits for nothing", wait.span,
                    "put a request after it, or remove it"))
            else:
                self.c.diags.append(warning(
                    "WL236", f"this `wait` ends phase `{phase}` of session `{s.name}`: no "
                    "request of the session follows it in the phase, so it is counted after "
                    "the phase's barrier (every session done with the phase), before the "
                    "session's next request", wait.span,
                    f"to pause during `{phase}`, put the request it comes before in phase "
                    f"`{phase}` too; to pause after the barrier, move the `wait` into the next "
                    "phase, before that request"))


def trailing_waits(body: tuple) -> list[tuple[ir.Wait, str | None]]:
    """The waits no request of the session follows: at the end of a phase (with its name), or
    at the end of the session (None). A wait in a loop that sends requests comes before the
    next run's first request, and is not one."""
    out, pending = _waits(body)
    return out + [(w, None) for w in pending]


def _waits(body: tuple) -> tuple[list[tuple[ir.Wait, str | None]], list[ir.Wait]]:
    """Output: the waits that end a phase inside `body`, and the waits no request follows in
    `body` itself (its tail)."""
    out: list[tuple[ir.Wait, str | None]] = []
    pending: list[ir.Wait] = []
    for s in body:
        sends = isinstance(s, REQUESTS) or any(isinstance(x, REQUESTS) for x in _all((s,)))
        if isinstance(s, ir.Wait):
            pending.append(s)
            continue
        tails: list[ir.Wait] = []
        for field in ("body", "then", "orelse"):
            inner, tail = _waits(getattr(s, field, ()))
            out += inner
            tails += tail
        if isinstance(s, ir.Phase):
            out += [(w, s.name) for w in tails]
            tails = []
        if not sends and not isinstance(s, ir.Phase):
            pending += tails
        else:  # a loop's tail comes before its next run's request; a block's ends it
            pending = [] if isinstance(s, LOOPS) else tails
    return out, pending


def _all(body: Iterable[Any]) -> Iterable[Any]:
    """Every statement of a body, nested ones included."""
    for stmt in body:
        yield stmt
        for field in ("body", "then", "orelse"):
            yield from _all(getattr(stmt, field, ()))


def _whole(v: object) -> TypeGuard[int | float]:
    """Whether `v` is a whole number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer()
