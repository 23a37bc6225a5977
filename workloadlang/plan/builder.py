"""The planner's state and plan-time values, shared by the planner's walk (`planner.py`) and
the planning of arrivals and traces.

Input: an `ir.Workload`, its salt and settings, `Limits`. Output: `Builder` (the messages,
request drafts, picks and diagnostics made so far, the size budget), `Ctx` (where a statement is
planned: session copy, phase, label, loop variables, path), `Conv` (a conversation: its last
message and size), `Draft` (a request before its cache expectation), and the value of an
expression where it is planned (`value`: a random draw too, seeded per statement; `count`,
`tokens`, `iterations`, `seconds`, `in_bounds`, `options_value`), with diagnostics on the
builder for what cannot be planned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloadlang import bounds, ir
from workloadlang.diagnostics import Diagnostic
from workloadlang.evaluate import DRAWS, Drawing, EvalError, Value, evaluate
from workloadlang.irexpr import sub_exprs
from workloadlang.plan import draws
from workloadlang.plan.dataplan import DataDraws
from workloadlang.plan.limits import Budget, Limits
from workloadlang.plan.model import Pick, PMessage, Role, Seg
from workloadlang.plan.prefix import Lane, message_weight

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_HIT_RATIO = 0.9


@dataclass
class Conv:
    """A conversation being built: its last message (the chain before it is the rest), its
    tokens so far, the last request sent on it, the tokens added since, the ids of the tool
    calls of its last assistant turn that no `tool` message answered yet, and the requests
    whose answers its messages since carry (its next request waits for them)."""

    last: int | None = None
    tokens: int = 0
    last_request: str | None = None
    new_tokens: int = 0
    calls: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # requests whose answers it carries (`reply NAME`), not sent yet


class Ctx:
    """Where the walk is: session, phase, label, iteration index, stable path, bindings, the
    `until` loop instance around it, whether it is in an `isolated` block, the branches of
    parallel forks it is in (`lane`: (fork, branch) pairs, outermost first). Immutable by
    convention: `at` and `replace` make a changed copy (a plain class: the walk makes one per
    statement, and a dataclass `replace` cost a third of a 60,000-request plan's time)."""

    __slots__ = ("session", "session_name", "copy", "phase", "label", "index", "path", "env",
                 "stop", "isolated", "lane")

    def __init__(self, session: str, session_name: str, copy: int, phase: str,
                 label: str | None, index: int, path: str, env: Mapping[str, Value],
                 stop: tuple[str, str, int] | None = None, isolated: bool = False,
                 lane: Lane = ()):
        self.session, self.session_name, self.copy, self.phase = session, session_name, copy, phase
        self.label, self.index, self.path, self.env = label, index, path, env
        self.stop, self.isolated, self.lane = stop, isolated, lane

    def replace(self, **kw: Any) -> Ctx:
        new = object.__new__(Ctx)
        new.session, new.session_name, new.copy = self.session, self.session_name, self.copy
        new.phase, new.label, new.index, new.path = self.phase, self.label, self.index, self.path
        new.env, new.stop, new.isolated = self.env, self.stop, self.isolated
        new.lane = self.lane
        for name, v in kw.items():
            setattr(new, name, v)
        return new

    def at(self, path: str, **kw: Any) -> Ctx:
        return self.replace(path=f"{self.path}/{path}", **kw)


@dataclass(slots=True)
class Draft:
    """A planned request before the cache pass: `fields` are its `PRequest` fields but the
    expectation's; `group` is who it runs in order with (its session, or `trace` for every
    trace request), `candidates` the requests to name first as its prefix's source, `resend_of`
    the request it re-sends, `generated` the tokens its reply leaves in a cache, `lane` the
    parallel branches it is in (its group's requests in other branches of a fork run beside
    it), `warm` that its prompt was sent before the run (`probe ... expect cached`): a cache
    that kept it serves all of it but its last token."""

    fields: dict[str, Any]
    group: str
    candidates: tuple[str, ...]
    resend_of: str | None
    generated: int
    lane: Lane = ()
    warm: bool = False


class Builder:
    """Accumulates messages, requests, names and diagnostics during one walk."""

    def __init__(self, wl: ir.Workload, salt: str, options: dict[str, Any],
                 budget: Budget | None = None):
        self.wl, self.salt, self.options = wl, salt, options
        self.data = DataDraws({}, salt)  # the datasets' items taken (`dataplan.py`)
        self.messages: list[PMessage] = []
        self.upto: list[int] = []  # tokens of each message's conversation up to it
        self.drafts: list[Draft] = []
        self.by_id: dict[str, int] = {}  # request id -> its draft
        self.names: dict[tuple[str, str], dict[int, str]] = {}
        self.id_next: dict[str, int] = {}  # request id base -> the next suffix to try
        self.phases: list[str] = []
        self.phase_runs: dict[tuple[str, str], int] = {}  # (session, phase) -> runs so far
        # per (session, lane): its last request, the requests its next one waits for (the
        # last, or every branch's last after a parallel fork), the wait before its next one
        # and the reading time (s per token of its last answer) on top
        self.last_in_lane: dict[tuple[str, Lane], str | None] = {}
        self.frontier: dict[tuple[str, Lane], tuple[str, ...]] = {}
        self.pending_wait: dict[tuple[str, Lane], float] = {}
        self.pending_read: dict[tuple[str, Lane], float] = {}
        self.forks = 0  # parallel forks so far (their ids)
        self.picks: list[Pick] = []
        self.texts: dict[int, Seg] = {}  # id of a literal part of the IR -> its segment
        self.strings: dict[str, Seg] = {}  # a computed string part -> its segment
        self.declared = {t.name: t for t in wl.texts}  # `text NAME = ...`
        self.named: dict[str, tuple[Seg, ...]] = {}  # a named text -> its segments, made once
        self.text_parts: dict[str, int] = {}  # a named text -> its segments' count (`texts`)
        self.text_table: list[str] = []  # the long literal texts, each once (`Plan.texts`)
        self.text_refs: dict[str, int] = {}  # a long literal text -> its place in the table
        self.drawn: dict[int, bool] = {}  # id of an expression -> whether it draws
        self.diags: list[Diagnostic] = []
        self.budget = budget or Budget(Limits())
        # request id -> the params its generation budget (`max_tokens`) was written with
        self.budget_params: dict[str, tuple[str, ...]] = {}
        self.param_names = frozenset(p.name for p in wl.params)

    def error(self, code: str, message: str, span: ir.Span, hint: str | None = None) -> None:
        self.diags.append(Diagnostic(code=code, message=message, span=span, hint=hint))

    def append(self, conv: Conv, role: Role, segs: tuple[Seg, ...], new: int,
               span: ir.Span, call_id: str = "", pick: int | None = None) -> None:
        """Add a message at the end of `conv` (it names conv's last message as its `after`);
        an assistant turn's tool calls wait for their `tool` messages."""
        self.budget.message(span)
        message = PMessage(role=role, segs=segs, after=conv.last, call_id=call_id, pick=pick)
        if role == "assistant":
            conv.calls = tuple(g.key for g in segs if g.kind == "call")
        self.messages.append(message)
        conv.tokens += message_weight(message)
        self.upto.append(conv.tokens)
        conv.last = len(self.messages) - 1
        conv.new_tokens += new


# ---------------------------------------------------------------- expressions


def value(b: Builder, expr: ir.Expr, ctx: Ctx) -> Value:
    """`expr`'s value in `ctx`; a random draw in it is drawn for this statement of this session
    copy (`draws.py`), the same for the same salt."""
    env = ctx.env
    if draws_in(b, expr):
        def drawer(func: str, args: list[float], span: ir.Span) -> float:
            problem = draws.check_args(func, args)
            if problem:
                raise EvalError(problem, span)
            return draws.draw(b.salt, f"{ctx.path}@{span.line}:{span.col}", func, args)
        env = Drawing(env, drawer)
    try:
        return evaluate(expr, env)
    except EvalError as e:
        b.error("WL404", str(e.message), e.span or expr.span)
        return None


def draws_in(b: Builder, expr: ir.Expr) -> bool:
    """Whether `expr` calls a random draw (remembered per expression)."""
    found = b.drawn.get(id(expr))
    if found is None:
        found = b.drawn[id(expr)] = (isinstance(expr, ir.Call) and expr.func in DRAWS) or any(
            draws_in(b, e) for e in sub_exprs(expr))
    return found


def count(b: Builder, expr: ir.Expr, ctx: Ctx, what: str) -> int:
    """Evaluate a whole, non-negative number (tokens, counts)."""
    v = value(b, expr, ctx)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
        b.error("WL404", f"{what} must be a non-negative number, got {v!r}", expr.span)
        return 0
    if v == math.inf:
        b.error("WL404", f"{what} must be finite", expr.span)
        return 0
    return int(math.ceil(v)) if isinstance(v, float) else v


def tokens(b: Builder, expr: ir.Expr, ctx: Ctx, what: str) -> int:
    """A size in tokens: a `count` no larger than one request may be (`Limits`)."""
    n = count(b, expr, ctx, what)
    b.budget.size(n, what, expr.span)
    return n


def iterations(b: Builder, expr: ir.Expr, ctx: Ctx, what: str) -> int:
    """A loop's count: a `count` no larger than the request limit."""
    n = count(b, expr, ctx, what)
    b.budget.count(n, what, expr.span)
    return n


def seconds(b: Builder, expr: ir.Expr, ctx: Ctx) -> float:
    v = value(b, expr, ctx)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0.0
    return float(v) if in_bounds(b, "wait", v, expr.span) else 0.0


def in_bounds(b: Builder, place: str, v: Any, span: ir.Span) -> bool:
    """Whether a computed value fits `bounds.PLACES[place]` (a fraction is rounded where a whole
    number is needed); WL401 when it does not."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return True
    problem = bounds.out_of_bounds(place, v)
    if problem and problem != "must be a whole number":
        b.error("WL401", f"`{place}` {problem}, but it is {bounds.show_value(place, v)} here",
                span)
        return False
    return True


def options_value(b: Builder, opts: tuple[ir.Option, ...], ctx: Ctx) -> dict[str, Any]:
    """Evaluate an options block; null values leave their key out."""
    out: dict[str, Any] = {}
    for o in opts:
        v = value(b, o.value, ctx)
        if v is not None:
            out[o.key] = v
    return out
