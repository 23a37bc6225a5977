"""The planner: a pure function `(IR, params, salt, env) -> Plan`.

Input: an `ir.Workload` that passed `check`, resolved param values (`evaluate.resolve_params`), a
salt, and the environment (`max_context`: the engine's context limit, or None).
Output: a `plan.model.Plan`, or `WorkloadError` with every plan-time diagnostic (WL4xx).

No I/O, no clock, no global RNG: the same inputs give byte-identical plans and the same hash.
Each request's `expected_cached` is computed by replaying the schedule against a perfect prefix
cache over planned segments (see `prefix.py`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from workloadlang import ir, limits
from workloadlang.diagnostics import Diagnostic, WorkloadError
from workloadlang.evaluate import EvalError, evaluate, refs_in
from workloadlang.plan import synth
from workloadlang.plan.model import (
    Expectation,
    GatePlan,
    Plan,
    PMessage,
    PRequest,
    Seg,
    SessionInfo,
    Totals,
)
from workloadlang.plan.prefix import PrefixIndex, atoms_of, message_weight
from workloadlang.select import gate_metric_refs, select_static

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_HIT_RATIO = 0.9


@dataclass
class Conv:
    """A conversation being built: message indices and the last request sent on it."""

    msgs: list[int] = field(default_factory=list)
    last_request: str | None = None
    new_tokens: int = 0


@dataclass(frozen=True)
class Ctx:
    """Where the walk is: session, phase, label, iteration index, stable path, bindings."""

    session: str
    session_name: str
    copy: int
    phase: str
    label: str | None
    index: int
    path: str
    env: Mapping[str, Any]
    stop: tuple[str, str, int] | None = None
    isolated: bool = False  # inside an `isolated` block

    def at(self, path: str, **kw: Any) -> "Ctx":
        return replace(self, path=f"{self.path}/{path}", **kw)


class Builder:
    """Accumulates messages, requests, names and diagnostics during one walk."""

    def __init__(self, wl: ir.Workload, salt: str, options: dict[str, Any]):
        self.wl, self.salt, self.options = wl, salt, options
        self.messages: list[PMessage] = []
        self.requests: list[PRequest] = []
        self.names: dict[tuple[str, str], dict[int, str]] = {}
        self.ids: set[str] = set()
        self.phases: list[str] = []
        self.last_in_session: dict[str, str] = {}
        self.pending_wait: dict[str, float] = {}
        self.prefix = PrefixIndex()
        self.diags: list[Diagnostic] = []
        # request id -> the params its generation budget (`max_tokens`) was written with
        self.budget_params: dict[str, tuple[str, ...]] = {}
        self.param_names = frozenset(p.name for p in wl.params)

    def error(self, code: str, message: str, span: ir.Span, hint: str | None = None) -> None:
        self.diags.append(Diagnostic(code=code, message=message, span=span, hint=hint))


# ---------------------------------------------------------------- expressions


def value(b: Builder, expr: ir.Expr, ctx: Ctx) -> Any:
    try:
        return evaluate(expr, ctx.env)
    except EvalError as e:
        b.error("WL404", str(e.message), e.span or expr.span)
        return None


def count(b: Builder, expr: ir.Expr, ctx: Ctx, what: str) -> int:
    """Evaluate a whole, non-negative number (tokens, counts)."""
    v = value(b, expr, ctx)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        b.error("WL404", f"{what} must be a non-negative number, got {v!r}", expr.span)
        return 0
    return int(math.ceil(v)) if isinstance(v, float) else v


def seconds(b: Builder, expr: ir.Expr, ctx: Ctx) -> float:
    v = value(b, expr, ctx)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0.0
    return float(v) if in_bounds(b, "wait", v, expr.span) else 0.0


def in_bounds(b: Builder, place: str, v: Any, span: ir.Span) -> bool:
    """Whether a computed value fits `limits.PLACES[place]` (a fraction is rounded where a whole
    number is needed); WL401 when it does not."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return True
    problem = limits.out_of_bounds(place, v)
    if problem and problem != "must be a whole number":
        b.error("WL401", f"`{place}` {problem}, but it is {limits.show_value(place, v)} here",
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


# ---------------------------------------------------------------- statements


def walk(b: Builder, body: tuple[ir.Stmt, ...], ctx: Ctx, conv: Conv) -> None:
    for i, stmt in enumerate(body):
        STMT[stmt.kind](b, stmt, ctx.at(str(i)), conv)


def stmt_message(b: Builder, s: ir.Message, ctx: Ctx, conv: Conv) -> None:
    segs = tuple(part_seg(b, p, ctx.at(str(j))) for j, p in enumerate(s.parts))
    b.messages.append(PMessage(role=s.role, segs=segs))
    conv.msgs.append(len(b.messages) - 1)
    conv.new_tokens += sum(g.tokens for g in segs)


def part_seg(b: Builder, p: ir.ContentPart, ctx: Ctx) -> Seg:
    if isinstance(p, ir.TextPart):
        return Seg(kind="text", text=p.value, tokens=text_tokens(p.value))
    needle = None if p.needle_at is None else value(b, p.needle_at, ctx)
    if needle is not None and not 0 <= float(needle) <= 1:
        b.error("WL401", f"needle depth must lie in 0..1, got {needle}", p.needle_at.span)
    key = f"{ctx.session}:{ctx.path}"
    return Seg(kind="filler", key=key, tokens=count(b, p.tokens, ctx, "filler size"),
               needle_at=None if needle is None else float(needle))


def text_tokens(text: str) -> int:
    """Planned size of literal text: about 4 characters per token."""
    return max(1, math.ceil(len(text) / 4))


def stmt_reply(b: Builder, s: ir.Reply, ctx: Ctx, conv: Conv) -> None:
    max_tokens = count(b, s.max_tokens, ctx, "max_tokens")
    in_bounds(b, "max_tokens", max_tokens, s.max_tokens.span)
    abort = None if s.abort_after is None else count(b, s.abort_after, ctx, "abort point")
    kept = "partial" if abort is not None and s.mode != "drop" else s.mode
    expect = tuple(expectation(b, e, conv) for e in s.expect)
    req = add_request(b, s, ctx, conv, kind="reply", max_tokens=max_tokens, abort=abort,
                      kept=kept, options=options_value(b, s.options, ctx), expect=expect)
    if kept != "drop":
        tokens = abort if abort is not None else max_tokens
        seg = Seg(kind="partial" if kept == "partial" else "reply", key=req.id, tokens=tokens,
                  synthetic=kept == "synthetic")
        b.messages.append(PMessage(role="assistant", segs=(seg,)))
        conv.msgs.append(len(b.messages) - 1)


def expectation(b: Builder, e: ir.Expect, conv: Conv) -> Expectation:
    if e.what == "text":
        return Expectation(what="text", text=e.text)
    for idx in reversed(conv.msgs):
        for seg in b.messages[idx].segs:
            if seg.kind == "filler" and seg.needle_at is not None:
                return Expectation(what="needle", text=synth.needle_code(b.salt, seg.key))
    b.error("WL404", "`expect reply contains needle` but no filler in this conversation has a "
            "needle", e.span, hint="add `needle at DEPTH` to a filler before this reply")
    return Expectation(what="needle", text="")


def stmt_probe(b: Builder, s: ir.Probe, ctx: Ctx, conv: Conv) -> None:
    max_tokens = 1 if s.max_tokens is None else count(b, s.max_tokens, ctx, "max_tokens")
    in_bounds(b, "max_tokens", max_tokens, s.span)
    add_request(b, s, ctx, conv, kind="probe", max_tokens=max_tokens, abort=None, kept="drop",
                options=options_value(b, s.options, ctx), expect=())


def stmt_resend(b: Builder, s: ir.Resend, ctx: Ctx, conv: Conv) -> None:
    idx = 0 if s.index is None else count(b, s.index, ctx, "index")
    src_id = b.names.get((ctx.session, s.name), {}).get(idx)
    if src_id is None:
        b.error("WL404", f"`{s.name}[{idx}]` names no earlier request in {ctx.session}", s.span)
        return
    src = next(r for r in reversed(b.requests) if r.id == src_id)
    max_tokens = src.max_tokens if s.max_tokens is None else count(b, s.max_tokens, ctx, "max_tokens")
    in_bounds(b, "max_tokens", max_tokens, s.span)
    again = Conv(msgs=list(src.messages), last_request=src.id)
    add_request(b, s, replace(ctx, index=idx), again, kind="resend", max_tokens=max_tokens,
                abort=None, kept="drop", options=dict(src.options), expect=src.expect)


def stmt_wait(b: Builder, s: ir.Wait, ctx: Ctx, conv: Conv) -> None:
    b.pending_wait[ctx.session] = b.pending_wait.get(ctx.session, 0.0) + seconds(b, s.duration, ctx)


def stmt_turn(b: Builder, s: ir.Turn, ctx: Ctx, conv: Conv) -> None:
    walk(b, s.body, replace(ctx, label=s.name, isolated=ctx.isolated or s.isolated), conv)


def stmt_phase(b: Builder, s: ir.Phase, ctx: Ctx, conv: Conv) -> None:
    if ctx.phase:
        b.error("WL404", f"phase `{s.name}` is nested in phase `{ctx.phase}`", s.span)
    if s.name not in b.phases:
        b.phases.append(s.name)
    walk(b, s.body, replace(ctx, phase=s.name), conv)


def stmt_for(b: Builder, s: ir.For, ctx: Ctx, conv: Conv) -> None:
    if s.over is not None:
        items = value(b, s.over, ctx)
        items = items if isinstance(items, list) else []
        pairs = list(enumerate(items))
    else:
        lo, hi = count(b, s.low, ctx, "loop bound"), count(b, s.high, ctx, "loop bound")
        pairs = [(i, i) for i in range(lo, hi)]
    if s.reverse:
        pairs.reverse()
    group = f"{ctx.session}:{ctx.path}" if s.until else None
    for pos, (idx, val) in enumerate(pairs):
        stop = (group, s.until, pos) if group else ctx.stop
        sub = ctx.at(f"{pos}", env={**ctx.env, s.var: val}, index=idx,
                     label=s.label or ctx.label, stop=stop, isolated=ctx.isolated or s.isolated)
        walk(b, s.body, sub, conv)


def stmt_repeat(b: Builder, s: ir.Repeat, ctx: Ctx, conv: Conv) -> None:
    loop(b, s.body, isolating(ctx, s), conv, count(b, s.count, ctx, "repeat count"), s.var,
         s.label)


def stmt_grow(b: Builder, s: ir.Grow, ctx: Ctx, conv: Conv) -> None:
    size, step = count(b, s.until, ctx, "grow size"), count(b, s.by, ctx, "grow step")
    if step <= 0:
        b.error("WL401", "grow step must be positive", s.by.span)
        return
    loop(b, s.body, isolating(ctx, s), conv, max(1, math.ceil(size / step)), s.var, s.label)


def isolating(ctx: Ctx, s: ir.Repeat | ir.Grow) -> Ctx:
    """Output: `ctx`, marked isolated when the block `s` is."""
    return replace(ctx, isolated=True) if s.isolated else ctx


def loop(b: Builder, body, ctx: Ctx, conv: Conv, n: int, var: str | None, label: str | None) -> None:
    for k in range(n):
        env = {**ctx.env, var: k} if var else ctx.env
        walk(b, body, ctx.at(str(k), env=env, index=k, label=label or ctx.label), conv)


def stmt_spawn(b: Builder, s: ir.Spawn, ctx: Ctx, conv: Conv) -> None:
    for k in range(count(b, s.count, ctx, "spawn count")):
        env = {**ctx.env, s.var: k} if s.var else ctx.env
        child = Conv(msgs=list(conv.msgs) if s.mode == "fork" else [],
                     last_request=conv.last_request if s.mode == "fork" else None)
        walk(b, s.body, ctx.at(str(k), env=env, index=k, label=s.label or ctx.label,
                               isolated=ctx.isolated or s.isolated), child)


def stmt_fresh(b: Builder, s: ir.Fresh, ctx: Ctx, conv: Conv) -> None:
    walk(b, s.body, replace(ctx, label=s.label or ctx.label,
                            isolated=ctx.isolated or s.isolated), Conv())


def stmt_if(b: Builder, s: ir.If, ctx: Ctx, conv: Conv) -> None:
    cond = value(b, s.cond, ctx)
    walk(b, s.then, ctx.at("then"), conv) if cond else walk(b, s.orelse, ctx.at("else"), conv)


STMT = {
    "message": stmt_message, "reply": stmt_reply, "probe": stmt_probe, "resend": stmt_resend,
    "wait": stmt_wait, "turn": stmt_turn, "phase": stmt_phase, "for": stmt_for,
    "repeat": stmt_repeat, "grow": stmt_grow, "spawn": stmt_spawn, "fresh": stmt_fresh,
    "if": stmt_if,
}


# ---------------------------------------------------------------- requests


def request_id(b: Builder, ctx: Ctx, label: str) -> str:
    base = f"{ctx.session}/{ctx.phase + '/' if ctx.phase else ''}{label}/{ctx.index}"
    rid, k = base, 1
    while rid in b.ids:
        rid, k = f"{base}.{k}", k + 1
    b.ids.add(rid)
    return rid


def add_request(b: Builder, s, ctx: Ctx, conv: Conv, *, kind, max_tokens, abort, kept,
                options, expect) -> PRequest:
    label = getattr(s, "label", None) or ctx.label or kind
    rid = request_id(b, ctx, label)
    budget = getattr(s, "max_tokens", None)
    if budget is not None:
        b.budget_params[rid] = tuple(sorted(refs_in(budget) & b.param_names))
    msgs = [b.messages[i] for i in conv.msgs]
    atoms = atoms_of(msgs)
    prompt = sum(w for _, w in atoms)
    candidates = [conv.last_request, b.last_in_session.get(ctx.session)]
    expected, source = b.prefix.best(atoms, candidates)
    deps = tuple(dict.fromkeys(d for d in (b.last_in_session.get(ctx.session), conv.last_request)
                               if d))
    stop_group, stop_on, stop_iter = ctx.stop if ctx.stop else (None, None, None)
    req = PRequest(
        id=rid, seq=len(b.requests), session=ctx.session, session_name=ctx.session_name,
        copy_index=ctx.copy, phase=ctx.phase, label=label, index=ctx.index, kind=kind,
        name=getattr(s, "name", None) if kind != "resend" else None, deps=deps,
        messages=tuple(conv.msgs), new_tokens=conv.new_tokens, prompt_tokens=prompt,
        expected_cached=min(expected, max(0, prompt - 1)), prefix_source=source,
        max_tokens=max_tokens, abort_after=abort, reply_kept=kept,
        options={**b.options, **options}, expect=expect, stop_group=stop_group, stop_on=stop_on,
        stop_iter=stop_iter, wait_before=b.pending_wait.pop(ctx.session, 0.0),
        isolated=ctx.isolated or getattr(s, "isolated", False), span=s.span)
    b.requests.append(req)
    generated = abort if abort is not None else max_tokens
    b.prefix.add(rid, atoms, generated if kept != "drop" else 0, partial=kept == "partial")
    b.last_in_session[ctx.session] = rid
    conv.last_request, conv.new_tokens = rid, 0
    if req.name:
        b.names.setdefault((ctx.session, req.name), {})[ctx.index] = rid
    return req


# ---------------------------------------------------------------- the whole plan


def build_plan(wl: ir.Workload, params: Mapping[str, Any], salt: str, source: str = "",
               env: Mapping[str, Any] | None = None) -> Plan:
    """Plan a checked workload. Raises `WorkloadError` with every plan-time diagnostic."""
    env = dict(env or {})
    genv = {**env, **params}
    b = Builder(wl, salt, {})
    root = Ctx(session="", session_name="", copy=0, phase="", label=None, index=0, path="",
               env=genv)
    b.options = options_value(b, wl.options, root)
    sessions = plan_sessions(b, wl, root)
    if not b.requests and not b.diags:
        b.error("WL410", "the plan has no request: with these params no session sends anything",
                wl.sessions[0].span if wl.sessions else wl.span,
                "a `repeat`, `spawn` or session count, or a loop range, is 0 here")
    settings = plan_settings(b, wl, root, len(sessions))
    check_limits(b, settings["max_context"])
    gates = plan_gates(b, wl, genv, [s.id for s in sessions])
    if b.diags:
        raise WorkloadError(b.diags)
    plan = Plan(
        workload=wl.name, doc=wl.doc, source=source, params=dict(params), salt=salt,
        phases=tuple(b.phases), sessions=tuple(sessions), messages=tuple(b.messages),
        requests=tuple(b.requests), calibrations=wl.calibrations, gates=tuple(gates),
        report=wl.report, totals=totals(b.requests, sessions, settings["concurrency"]),
        **settings)
    return plan.model_copy(update={"plan_hash": plan_hash(plan)})


def plan_sessions(b: Builder, wl: ir.Workload, root: Ctx) -> list[SessionInfo]:
    out = []
    for s in wl.sessions:
        n = 1 if s.repeat is None else count(b, s.repeat, root, "session repeat")
        for k in range(n):
            sid = f"{s.name}#{k}"
            before = len(b.requests)
            ctx = replace(root, session=sid, session_name=s.name, copy=k, path=sid)
            walk(b, s.body, ctx, Conv())
            reqs = b.requests[before:]
            peak = max((r.prompt_tokens + r.max_tokens for r in reqs), default=0)
            out.append(SessionInfo(id=sid, name=s.name, copy_index=k, requests=len(reqs),
                                   peak_tokens=peak))
    return out


def plan_settings(b: Builder, wl: ir.Workload, root: Ctx, n_sessions: int) -> dict[str, Any]:
    st = wl.settings

    def get(expr, default, conv=lambda v: v):
        return default if expr is None else conv(value(b, expr, root))

    limit = get(st.max_context, root.env.get("max_context"))
    for name in ("concurrency", "timeout", "hit_ratio", "max_context"):
        expr = getattr(st, name)
        if expr is not None and not in_bounds(b, name, value(b, expr, root), expr.span):
            limit = None if name == "max_context" else limit
    return {
        "concurrency": max(1, int(get(st.concurrency, max(1, n_sessions)) or 1)),
        "timeout_s": float(get(st.timeout, DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S),
        "fail_fast": bool(get(st.fail_fast, False)),
        "hit_ratio": float(get(st.hit_ratio, DEFAULT_HIT_RATIO)),
        "max_context": None if limit is None else int(limit),
    }


def check_limits(b: Builder, limit: int | None) -> None:
    """WL406: a planned request whose prompt plus generation exceeds the context limit."""
    if limit is None:
        return
    seen: set[tuple[int, int]] = set()
    for r in b.requests:
        need = r.prompt_tokens + r.max_tokens
        if need > limit and (r.span.line, r.span.col) not in seen:
            seen.add((r.span.line, r.span.col))
            b.error("WL406", f"request {r.id} needs {need:,} tokens (prompt {r.prompt_tokens:,} + "
                    f"max_tokens {r.max_tokens:,}), more than the context limit {limit:,}",
                    r.span, hint=too_big_hint(b.budget_params.get(r.id, ())))


def too_big_hint(budget_params: tuple[str, ...]) -> str:
    """Output: WL406's hint, naming the flags of the params the request's `max_tokens` was
    written with (`max_tokens` -> `--max-tokens`)."""
    flags = " or ".join(f"--{n.replace('_', '-')}" for n in budget_params)
    lower = f"lower the generation budget ({flags}) or the prompt" if flags else "lower the sizes"
    return f"{lower}, or raise --max-context if the engine allows"


def plan_gates(b: Builder, wl: ir.Workload, env: Mapping[str, Any],
               sessions: list[str]) -> list[GatePlan]:
    out = []
    by_session: dict[str, list] = {}
    for r in b.requests:
        by_session.setdefault(r.session, []).append(r)
    for g in wl.gates:
        scopes = sessions if g.scope == "each_session" else ["overall"]
        reads: dict[str, int] = {}
        for scope in scopes:
            pool = b.requests if scope == "overall" else by_session.get(scope, [])
            ids: set[str] = set()
            for ref in gate_metric_refs(g):
                picked = select_static(pool, ref.selector, env)
                if not picked and (scope == "overall" or scope == sessions[0]):
                    b.error("WL405", f"gate `{g.name}`: `{ref.metric}{{...}}` matches no planned "
                            f"request" + ("" if scope == "overall" else f" in {scope}"), ref.span)
                ids.update(r.id for r in picked)
            reads[scope] = len(ids)
        out.append(GatePlan(gate=g, reads=reads))
    return out


def totals(reqs: list[PRequest], sessions: list[SessionInfo], concurrency: int) -> Totals:
    prompt = sum(r.prompt_tokens for r in reqs)
    cached = sum(r.expected_cached for r in reqs)
    peaks = sorted((s.peak_tokens for s in sessions), reverse=True)
    gen = sum(r.abort_after if r.abort_after is not None else r.max_tokens for r in reqs)
    return Totals(requests=len(reqs), prompt_tokens=prompt, cold_tokens=prompt - cached,
                  expected_cached_tokens=cached, max_tokens=sum(r.max_tokens for r in reqs),
                  peak_inflight_tokens=sum(peaks[:concurrency]),
                  working_set_tokens=prompt - cached + gen)


def plan_hash(plan: Plan) -> str:
    """sha256 of the canonical JSON of the plan, without its hash and without the path it was
    read from (`x.wl` and `./x.wl` are the same plan): equal plans, equal hashes. Which
    requests are `isolated` is hashed as a list of their ids, added only when there are any,
    so a plan without isolation keeps the hash it had before the field existed."""
    text = plan.model_dump_json(exclude={"plan_hash": True, "source": True,
                                         "requests": {"__all__": {"isolated"}}})
    isolated = [r.id for r in plan.requests if r.isolated]
    if isolated:
        text += "\nisolated " + " ".join(isolated)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["build_plan", "message_weight"]
