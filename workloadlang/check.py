"""Semantic checks of a parsed workload.

Input: an `ir.Workload` (from `workloadlang.parse`). Output: every `Diagnostic` found, in source
order; an empty list means the workload is fine. Nothing is raised for a bad workload.

The kinds of values and metrics and how they combine are `workloadlang.kinds`'s; `METRICS`,
`AGGREGATIONS`, `arith_kind` and `comparable` are handed on from there. The checker's core
(`checkexpr.Checker`: the diagnostics so far, the kinds of expressions) is given to each of its
parts: the params' (`checkparams`), the sessions' heads and load (`checksessions`), the message
parts that take text from elsewhere (`checkparts`), the flow of the statements (`checkflow`);
the settings, texts, statements, gates and report are here.

Names (WL2xx): unknown and duplicate params, sessions, gates, report items, request names,
option keys, calibrations; refs, loop variables, metrics, aggregations, functions and selector
names, with "did you mean". Types and units (WL3xx): each value has a kind (`number`, `duration`,
`ratio`, `bool`, `string`, `object`, `null`, lists of these) and each place wants one; the
arithmetic rules are in `kinds.arith_kind` and documented in docs/language.md ("Units"). Checks that
need param values (ranges of actual values, selectors matching planned requests) are the
planner's (WL4xx).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from workloadlang import bounds, ir
from workloadlang.checkexpr import Checker, shown
from workloadlang.checkflow import FlowChecks
from workloadlang.checkparams import (  # sweep_text: handed on (sweepresults.py)
    ParamChecks,
    sweep_text,
)
from workloadlang.checkparts import PartChecks
from workloadlang.checksessions import SessionChecks, statements
from workloadlang.diagnostics import Diagnostic, did_you_mean, sort_diagnostics, warning
from workloadlang.evaluate import COPY
from workloadlang.kinds import (
    AGGREGATIONS,
    BUILTIN_REFS,
    METRICS,
    SETTING_KINDS,
    Scope,
    agg_result,
    arith_kind,
    comparable,
    describe,
    element,
)
from workloadlang.selector import gate_metric_refs

__all__ = ["AGGREGATIONS", "METRICS", "arith_kind", "check", "comparable", "sweep_text"]

_STMT_VALUES: dict[str, tuple[tuple[str, str, str, str | None], ...]] = {
    "reply": (("max_tokens", "number", "the `max_tokens` of `reply`", "max_tokens"),
              ("abort_after", "number", "`abort after`", "abort after")),
    "probe": (("max_tokens", "number", "the `max_tokens` of `probe`", "max_tokens"),),
    "resend": (("index", "number", "the index of `resend`", "index"),
               ("max_tokens", "number", "the `max_tokens` of `resend`", "max_tokens")),
    "wait": (("duration", "duration", "`wait`", "wait"),
             ("reading", "number", "the reading speed of `wait` (tokens per second)",
              "reading")),
    "if": (("cond", "bool", "the condition of `if`", None),),
    "for": (("low", "number", "the start of the range", "loop bound"),
            ("high", "number", "the end of the range", "loop bound")),
    "repeat": (("count", "number", "the count of `repeat`", "repeat"),),
    "grow": (("until", "number", "the size of `grow until`", "grow until"),
             ("by", "number", "the step of `grow`", "grow by")),
    "spawn": (("count", "number", "the count of `spawn`", "spawn"),),
}
"""What each statement's expressions must be: (field, kind, how a message names it, the
`bounds.PLACES` entry its constant value must fit)."""


def check(wl: ir.Workload, flags: Collection[str] = ()) -> list[Diagnostic]:
    """All semantic problems of `wl`, in source order. `flags`: the options of the command
    that runs it (`output` for `--output`), which no param may be named like (WL234)."""
    checker = _WorkloadChecker(wl, frozenset(flags))
    checker.run()
    return sort_diagnostics(checker.diags)


# ---------------------------------------------------------------- the checker

class _WorkloadChecker(Checker):
    """The checks of a whole workload: the settings, texts, statements, gates and report here,
    the params', sessions' heads, message parts and flow by their parts, each given this
    checker."""

    def __init__(self, wl: ir.Workload, flags: frozenset[str] = frozenset()):
        super().__init__(wl, flags)
        self.sessions = SessionChecks(self)
        self.parts = PartChecks(self)

    def run(self) -> None:
        ParamChecks(self).check_params()
        self.check_settings()
        self.sessions.check_load()
        self.check_options(self.wl.options)
        self.check_calibrations()
        self.parts.check_datasets()
        self.check_texts()
        self.check_sessions()
        FlowChecks(self).check_flow()
        self.check_gates()
        self.check_report()
        self.check_unused()

    # -- params, settings, calibrations

    def check_settings(self) -> None:
        for name, wanted in SETTING_KINDS.items():
            place = name if name in bounds.PLACES else None
            self.value(getattr(self.wl.settings, name), self.top, wanted, f"`{name}`", place)

    def check_calibrations(self) -> None:
        self.unique(self.wl.calibrations, "calibration", key="what")
        for c in self.wl.calibrations:
            for e, what in ((c.tokens, "tokens"), (c.repeat, "repeat")):
                self.value(e, self.top, "number", f"`{what}` of `calibrate {c.what}`",
                           f"calibrate {what}")

    # -- named texts, sessions and statements

    def check_texts(self) -> None:
        """`text NAME = ...`: unique among texts and params (they share `$`); each part reads
        params and the texts declared before it (so no text is made from itself)."""
        self.unique(self.wl.texts, "text")
        scope = Scope(self.top)
        for t in self.wl.texts:
            if t.name in self.params or t.name in BUILTIN_REFS or t.name == COPY:
                self.err("WL202", f"text `{t.name}` has the name of a "
                         f"{'parameter' if t.name in self.params else 'built-in reference'}",
                         t.span, "give it another name: both are read as `$" + t.name + "`")
            self.check_parts(t.parts, scope, None)
            scope = scope.child(t.name, "text")
        self.texts = scope

    def check_sessions(self) -> None:
        if not self.wl.sessions:
            self.err("WL216", f"workload `{self.wl.name}` has no session, so it sends nothing",
                     self.wl.span, "add `session NAME { user \"...\"; reply N }`")
        self.unique(self.wl.sessions, "session")
        for s in self.wl.sessions:
            self.value(s.repeat, self.top, "number", "the `repeat` of a session",
                       "session repeat")
            if s.trace is not None:
                self.sessions.check_trace(s.trace)
            self.sessions.check_arrival(s)
            self.sessions.check_turns(s)
            self.stmts(s.body, Scope({**self.texts, COPY: "number"}, draws=True))

    def stmts(self, body: tuple, scope: Scope) -> None:
        for stmt in body:
            self.stmt(stmt, scope)

    def stmt(self, s: Any, scope: Scope) -> None:
        """One statement: its values (by `_STMT_VALUES`), options, parts, names, then bodies."""
        for field, wanted, what, place in _STMT_VALUES.get(s.kind, ()):
            self.value(getattr(s, field), scope, wanted, what, place)
        self.check_options(getattr(s, "options", ()), scope)
        if isinstance(s, ir.Message):
            self.check_parts(s.parts, scope, s.role)
        if isinstance(s, ir.Reply):
            self.check_reply_calls(s, scope)
        if isinstance(s, ir.Spawn):
            self.check_spawn(s, scope)
        if isinstance(s, ir.Resend) and s.name not in self.names.requests:
            self.err("WL207", f"no request is named `{s.name}`", s.span,
                     did_you_mean(s.name, self.names.requests) or
                     f"name a request with `as {s.name}` on a `reply` or `probe`")
        inner = self.loop_scope(s, scope)
        for field in ("body", "then", "orelse"):
            self.stmts(getattr(s, field, ()), inner)

    def check_parts(self, parts: tuple[ir.ContentPart, ...], scope: Scope,
                    role: str | None) -> None:
        """A message's parts (`role` None: a named text's)."""
        for part in parts:
            if isinstance(part, ir.ExprPart):
                self.check_expr_part(part, scope)
            elif isinstance(part, ir.FillerPart):
                self.check_filler(part, scope)
            elif isinstance(part, ir.ReplyPart):
                self.parts.check_reply_part(part, scope, role)
            elif isinstance(part, ir.DataPart):
                self.parts.check_data_part(part, scope)
            elif isinstance(part, ir.CallPart):
                if role != "assistant":
                    where = f"a `{role}` message" if role else "a named text"
                    self.err("WL230", f"a `call` in {where}", part.span,
                             "tool calls are made by the assistant: `assistant call NAME "
                             "{ ... }` (its result is a `tool` message)")
                self.check_call(part, scope)

    def check_filler(self, part: ir.FillerPart, scope: Scope) -> None:
        self.value(part.tokens, scope, "number", "the size of `filler`", "filler")
        self.value(part.needle_at, scope, "ratio", "the depth of `needle at`", "needle at")

    def check_call(self, call: ir.CallPart, scope: Scope) -> None:
        """A tool call's arguments: distinct keys, fillers of a size."""
        self.unique(call.args, "tool call argument", key="key")
        for arg in call.args:
            if isinstance(arg.value, ir.FillerPart):
                self.check_filler(arg.value, scope)
            elif isinstance(arg.value, ir.ExprPart):  # a string with `{$name}` in it
                self.value(arg.value.value, scope, "string", "a tool call's argument", None)

    def check_spawn(self, s: ir.Spawn, scope: Scope) -> None:
        """`keep` goes on from a fork's branch (WL231); a parallel spawn's branches hold no
        phase and nothing timed alone (WL232)."""
        if s.keep is not None:
            if s.mode != "fork":
                self.err("WL231", "`keep` needs a `fork`: the branches of a cold spawn start "
                         "from an empty conversation, not from the parent's", s.keep.span,
                         "write `spawn N fork ... keep ...`")
            self.value(s.keep.index, scope, "number", "the branch `keep` names", "index")
        if s.parallel:
            if s.isolated:
                self.err("WL232", "a `parallel` spawn cannot be `isolated`: its branches are in "
                         "flight together", s.span, "drop `isolated`, or `parallel`")
            for inner in statements(s.body):
                if isinstance(inner, ir.Phase):
                    self.err("WL232", f"phase `{inner.name}` is inside a `parallel` spawn",
                             inner.span, "a phase is a barrier across sessions: put the "
                             "spawn inside the phase")
                elif getattr(inner, "isolated", False):
                    self.err("WL232", "an `isolated` request or block inside a `parallel` "
                             "spawn", inner.span, "its branches are in flight together, so "
                             "nothing in them is timed alone")

    def check_reply_calls(self, s: ir.Reply, scope: Scope) -> None:
        """The tool calls a reply's turn carries: never on a dropped reply (nothing is kept)."""
        for call in s.calls:
            self.check_call(call, scope)
        if s.calls and s.mode == "drop":
            self.err("WL230", "a `call` on a `reply ... drop`: the reply's turn is not kept, "
                     "so the call is never sent", s.calls[0].span,
                     "keep the reply (`replay`, `replay content` or `synthetic`), or add the "
                     "call as `assistant call NAME { ... }`")

    def check_expr_part(self, part: ir.ExprPart, scope: Scope) -> None:
        """A part that is an expression: a string, or `$NAME` of a named text by itself."""
        kind = self.kind(part.value, scope)
        if kind == "text" and not isinstance(part.value, ir.Ref):
            self.err("WL302", "a named text is a part by itself (`$NAME`), not part of an "
                     "expression", part.value.span, "join parts with commas: `user $a, \"...\"`")
        elif kind not in ("text", "string", "any"):
            self.err("WL302", f"a message part must be a string, a named text or `filler N`, "
                     f"but {shown(part.value)} is {describe(kind)}", part.value.span,
                     "write `filler N` for N tokens of synthetic text")

    def loop_scope(self, s: Any, scope: Scope) -> Scope:
        """The scope of a statement's body: with its loop variable, if it has one."""
        var = getattr(s, "var", None)
        if var is None:
            return scope
        if var in scope:
            what = "parameter" if var in self.params else "name" if var in BUILTIN_REFS \
                else "loop variable"
            self.err("WL211", f"loop variable `{var}` hides the {what} `${var}`", s.span,
                     "give the loop variable another name")
        over = self.kind(s.over, scope) if isinstance(s, ir.For) and s.over else "list:number"
        if over != "any" and not element(over):
            self.err("WL302", f"`for ... in` needs a list or a range `lo..hi`, but "
                     f"{shown(s.over)} is {describe(over)}", s.over.span)
        return scope.child(var, element(over) or "any")

    # -- gates and report

    def gate_scope(self) -> Scope:
        return Scope(self.top, gates=True)

    def check_gates(self) -> None:
        self.unique(self.wl.gates, "gate")
        scope = self.gate_scope()
        for g in self.wl.gates:
            self.check_gate_sessions(g)
            self.check_test(g, f"gate `{g.name}`", scope)
            if g.when is not None:
                self.check_test(g.when, f"the condition of gate `{g.name}`", scope)

    def check_test(self, t: ir.Gate | ir.Condition, what: str, scope: Scope) -> None:
        """`LEFT [CMP RIGHT]` of a gate or of its `when`: metrics, selectors and kinds; without
        a comparison the left side must be yes/no."""
        left = self.gkind(t.left, scope)
        if t.op is None:
            if left not in ("bool", "any"):
                self.err("WL307", f"{what} has no comparison, so it must be true or false, but "
                         f"it is {describe(left)}", t.left.span,
                         "compare it (`... >= 90%`) or use all(...) / any(...)")
            return
        assert t.right is not None  # the grammar gives a comparison its right side
        right = self.gkind(t.right, scope)
        span = t.left.span.model_copy(update={"end_line": t.right.span.end_line,
                                              "end_col": t.right.span.end_col})
        self.combine(t.op, (t.left, t.right), (left, right), span)

    def check_gate_sessions(self, g: ir.Gate) -> None:
        """WL218 (a warning) for each session an `each session` gate can read nothing of: the
        gate judges only the sessions its selectors can read. Not when a selector names its
        session (`session=NAME`): that narrowing is what it says."""
        refs = gate_metric_refs(g)
        if g.scope != "each_session" or any(i.key == "session" for r in refs for i in r.selector):
            return
        judged = [s for s in self.wl.sessions
                  if any(self.names.can_read(s.name, r.selector) for r in refs)]
        if not judged:
            return  # no session at all: WL206 (an unknown name) or WL405 at plan time
        for s in self.wl.sessions:
            if s not in judged:
                self.diags.append(warning(
                    "WL218", f"gate `{g.name}` can read nothing of session `{s.name}`, so it "
                    f"judges only {', '.join(f'`{j.name}`' for j in judged)}", g.span,
                    f"say so with `session={judged[0].name}` in its selector"
                    if len(judged) == 1 else None))

    def check_report(self) -> None:
        self.unique(self.wl.report, "report item")
        scope = self.gate_scope()
        for item in self.wl.report:
            self.gkind(item.value, scope)

    def gkind(self, g: Any, scope: Scope) -> str:
        """The kind of a gate expression (kinds of metric values)."""
        if isinstance(g, ir.GNum):
            return self.kind(g.value, scope)
        if isinstance(g, ir.GBin):
            pair = (self.gkind(g.left, scope), self.gkind(g.right, scope))
            return self.combine(g.op, (g.left, g.right), pair, g.span)
        if isinstance(g, ir.Agg):
            return self.agg_kind(g, scope)
        if isinstance(g, ir.GCall):
            kinds = [self.gkind(a, scope) for a in g.args]
            return self.unify(kinds, g.span, f"the arguments of `{g.func}`")
        return self.metric_kind(g, scope)

    def metric_kind(self, m: ir.MetricRef, scope: Scope) -> str:
        for item in m.selector:
            self.check_sel_item(item, scope)
        if m.metric not in METRICS:
            self.err("WL203", f"unknown metric `{m.metric}`", m.span,
                     did_you_mean(m.metric, METRICS))
            return "any"
        return METRICS[m.metric]

    def agg_kind(self, g: ir.Agg, scope: Scope) -> str:
        kind = self.metric_kind(g.arg, scope)
        if g.func not in AGGREGATIONS:
            self.err("WL204", f"unknown aggregation `{g.func}`", g.span,
                     did_you_mean(g.func, AGGREGATIONS))
            return "any"
        if g.func in ("all", "any", "fraction") and kind not in ("bool", "any"):
            self.err("WL307", f"`{g.func}` needs a yes/no metric such as `ok` or `hit`, but "
                     f"`{g.arg.metric}` is {describe(kind)}", g.arg.span)
        return agg_result(g.func, kind)

    def check_sel_item(self, item: ir.SelItem, scope: Scope) -> None:
        if item.key in ("last", "first"):
            self.value(item.count, scope, "number", f"`{item.key}`", item.key)
            return
        known = self.names.matching(item.key)
        if item.key == "flag" and item.value in self.names.matching("name"):
            self.diags.append(warning(
                "WL235", f"`{item.value}` in a selector is the outcome flag, not the label or "
                f"phase `{item.value}`", item.span,
                f"write `label={item.value}` or `phase={item.value}` to select the "
                f"{'label' if item.value in self.names.labels else 'phase'}"))
        if item.key != "flag" and item.value not in known:
            self.err("WL206", self.names.unknown_message(item), item.span,
                     self.names.selector_hint(item, known))

    def check_unused(self) -> None:
        for p in self.wl.params:
            if p.name not in self.used:
                self.diags.append(warning("WL213", f"parameter `{p.name}` is never used", p.span,
                                          "use it as `$" + p.name + "`, or remove it"))
        for t in self.wl.texts:
            if t.name not in self.used:
                self.diags.append(warning("WL213", f"text `{t.name}` is never used", t.span,
                                          "use it as a message part, `$" + t.name + "`, or "
                                          "remove it"))
