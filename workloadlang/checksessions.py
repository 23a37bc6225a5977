"""The checks of a session's head and of the load it makes, a part of the checker
(`workloadlang.check`).

Input: each `ir.Session`'s trace source (`session NAME trace PATH { ... }`), arrivals
(`arrive every GAP [burst K]`, `arrive at TIMES`), turn rate (`turns every GAP`) and
`concurrency` cap; the workload's `slo { }` and its windows (`warmup`, `cooldown` of a
`duration`) of the checker's workload (`SessionChecks`, given the `checkexpr.Checker`).
Output: the checker's diagnostics: an unknown trace option (WL215),
a value of the wrong kind (WL301, WL302), a negative arrival time or bound (WL305), a capped
session with a phase (WL219), a turn rate with arrivals or a cap (WL240), a cool-down without
a duration (WL241), an SLO that is not one (WL242).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workloadlang import ir
from workloadlang.checkexpr import Checker, const_items
from workloadlang.diagnostics import did_you_mean
from workloadlang.evaluate import is_number
from workloadlang.kinds import SLO_KINDS, Scope, describe, is_zero

TRACE_OPTIONS = {"time_scale": "number", "offset": "number", "limit": "number",
                 "sample": "ratio", "block_tokens": "number", "max_tokens": "number",
                 "label": "string"}
"""The options of `session NAME trace PATH { ... }` and their kinds (docs/traces.md)."""


class SessionChecks:
    """The session-head and load checks (see the module), adding to the diagnostics of
    `checker`."""

    def __init__(self, checker: Checker) -> None:
        self.c = checker

    def check_arrival(self, s: ir.Session) -> None:
        """`arrive every GAP [burst K]` (a duration, a draw allowed) or `arrive at TIMES` (a
        duration or a list of them), `concurrency C`; a capped session has no phase (WL219)."""
        a = s.arrive
        if a is not None and a.how == "every":
            self.c.value(a.value, Scope(self.c.top, draws=True), "duration",
                       "the gap of `arrive every`", "arrive every")
            self.c.value(a.burst, self.c.top, "number", "`burst`", "burst")
        elif a is not None:
            kind = self.c.kind(a.value, self.c.top)
            if kind not in ("duration", "list:duration", "any", "list:any") and not is_zero(
                    a.value):
                self.c.err("WL302", f"the times of `arrive at` must be a duration or a list of "
                         f"durations, not {describe(kind)}", a.value.span,
                         "times from the run's start, like `[0s, 500ms, 2s]`")
            for v in const_items(a.value):
                if is_number(v) and v < 0:
                    self.c.err("WL305", f"an arrival time must be at least 0s, not {v:g}s",
                             a.value.span)
        self.c.value(s.concurrency, self.c.top, "number", "the `concurrency` of a session",
                   "concurrency")
        phase = s.concurrency is not None and next(
            (st for st in statements(s.body) if isinstance(st, ir.Phase)), None)
        if phase:
            self.c.err("WL219", f"session `{s.name}` has a `concurrency` cap and a phase "
                     f"(`{phase.name}`)", phase.span, "a copy waiting for its place would hold "
                     "every session at the phase's barrier: drop the cap or the phase")

    def check_turns(self, s: ir.Session) -> None:
        """`turns every GAP` (a duration, a draw allowed): the copies start together, so not
        with `arrive` nor a `concurrency` cap (WL240)."""
        if s.turns is None:
            return
        self.c.value(s.turns, Scope(self.c.top, draws=True), "duration",
                   "the gap of `turns every`", "turns every")
        other = "arrive" if s.arrive is not None else "concurrency" if s.concurrency else None
        if other:
            self.c.err("WL240", f"session `{s.name}` has both `turns every` and `{other}`",
                     s.turns.span, "with `turns every` every copy starts at once and the turns "
                     "arrive: drop `" + other + "`")

    def check_load(self) -> None:
        """The workload's SLOs (known keys of their kinds, WL242; WL202 twice) and windows:
        a `cooldown` is the end of a `duration` (WL241)."""
        st = self.c.wl.settings
        if st.cooldown is not None and st.duration is None:
            self.c.err("WL241", "`cooldown` is the end of the run's `duration`, and there is "
                     "none", st.cooldown.span, "set `duration = ...`, or drop `cooldown`")
        self.c.unique(self.c.wl.slo, "SLO", key="key")
        for o in self.c.wl.slo:
            wanted = SLO_KINDS.get(o.key)
            if wanted is None:
                self.c.err("WL242", f"unknown SLO `{o.key}`", o.span,
                         did_you_mean(o.key, SLO_KINDS) or
                         f"the SLOs are {', '.join(sorted(SLO_KINDS))}")
            else:
                self.c.value(o.value, self.c.top, wanted, f"the SLO `{o.key}`", f"slo {o.key}")
        if self.c.wl.slo and all(o.key == "attainment" for o in self.c.wl.slo):
            self.c.err("WL242", "`slo { }` bounds nothing", self.c.wl.slo[0].span,
                     "give a bound: `ttft = 2s`, `tpot = 50ms` or `e2e = 10s`")

    def check_trace(self, t: ir.TraceSource) -> None:
        """A trace session: its path is a string; its options are known (WL215) and of their
        kinds."""
        self.c.expect(t.path, self.c.top, "string", "the path of `trace`")
        self.c.unique(t.options, "trace option", key="key")
        for o in t.options:
            wanted = TRACE_OPTIONS.get(o.key)
            if wanted is None:
                self.c.err("WL215", f"unknown trace option `{o.key}`", o.span,
                         did_you_mean(o.key, TRACE_OPTIONS) or
                         f"the options are {', '.join(sorted(TRACE_OPTIONS))}")
            elif wanted == "ratio" and self.c.kind(o.value, self.c.top) == "number":
                continue  # `sample = 0.1` as well as `sample = 10%`
            else:
                self.c.expect(o.value, self.c.top, wanted, f"the trace option `{o.key}`")


def statements(body: tuple) -> Iterable[Any]:
    """Every statement of a body, nested ones included."""
    for stmt in body:
        yield stmt
        for field in ("body", "then", "orelse"):
            yield from statements(getattr(stmt, field, ()))
