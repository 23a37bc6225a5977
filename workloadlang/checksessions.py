"""The checks of a session's head, a part of the checker (`workloadlang.check`).

Input: each `ir.Session`'s trace source (`session NAME trace PATH { ... }`), arrivals
(`arrive every GAP [burst K]`, `arrive at TIMES`) and `concurrency` cap, through the checker it
is mixed into (`SessionChecks`: `err`, `expect`, `kind`, `value`, `unique`, `top`). Output: the
checker's diagnostics: an unknown trace option (WL215), a value of the wrong kind (WL302), a
negative arrival time (WL305), a capped session with a phase (WL219).
"""

from __future__ import annotations

from typing import Any, Iterable

from workloadlang import ir
from workloadlang.checkparams import _const_items, _is_number
from workloadlang.diagnostics import did_you_mean
from workloadlang.kinds import Scope, describe, is_zero

TRACE_OPTIONS = {"time_scale": "number", "offset": "number", "limit": "number",
                 "sample": "ratio", "block_tokens": "number", "max_tokens": "number",
                 "label": "string"}
"""The options of `session NAME trace PATH { ... }` and their kinds (docs/traces.md)."""


class SessionChecks:
    """The session-head checks of `check._Checker` (see the module)."""

    def check_arrival(self, s: ir.Session) -> None:
        """`arrive every GAP [burst K]` (a duration, a draw allowed) or `arrive at TIMES` (a
        duration or a list of them), `concurrency C`; a capped session has no phase (WL219)."""
        a = s.arrive
        if a is not None and a.how == "every":
            self.value(a.value, Scope(self.top, draws=True), "duration",
                       "the gap of `arrive every`", "arrive every")
            self.value(a.burst, self.top, "number", "`burst`", "burst")
        elif a is not None:
            kind = self.kind(a.value, self.top)
            if kind not in ("duration", "list:duration", "any", "list:any") and not is_zero(
                    a.value):
                self.err("WL302", f"the times of `arrive at` must be a duration or a list of "
                         f"durations, not {describe(kind)}", a.value.span,
                         "times from the run's start, like `[0s, 500ms, 2s]`")
            for v in _const_items(a.value):
                if _is_number(v) and v < 0:
                    self.err("WL305", f"an arrival time must be at least 0s, not {v:g}s",
                             a.value.span)
        self.value(s.concurrency, self.top, "number", "the `concurrency` of a session",
                   "concurrency")
        phase = s.concurrency is not None and next(
            (st for st in statements(s.body) if isinstance(st, ir.Phase)), None)
        if phase:
            self.err("WL219", f"session `{s.name}` has a `concurrency` cap and a phase "
                     f"(`{phase.name}`)", phase.span, "a copy waiting for its place would hold "
                     "every session at the phase's barrier: drop the cap or the phase")

    def check_trace(self, t: ir.TraceSource) -> None:
        """A trace session: its path is a string; its options are known (WL215) and of their
        kinds."""
        self.expect(t.path, self.top, "string", "the path of `trace`")
        self.unique(t.options, "trace option", key="key")
        for o in t.options:
            wanted = TRACE_OPTIONS.get(o.key)
            if wanted is None:
                self.err("WL215", f"unknown trace option `{o.key}`", o.span,
                         did_you_mean(o.key, TRACE_OPTIONS) or
                         f"the options are {', '.join(sorted(TRACE_OPTIONS))}")
            elif wanted == "ratio" and self.kind(o.value, self.top) == "number":
                continue  # `sample = 0.1` as well as `sample = 10%`
            else:
                self.expect(o.value, self.top, wanted, f"the trace option `{o.key}`")


def statements(body: tuple) -> Iterable[Any]:
    """Every statement of a body, nested ones included."""
    for stmt in body:
        yield stmt
        for field in ("body", "then", "orelse"):
            yield from statements(getattr(stmt, field, ()))
