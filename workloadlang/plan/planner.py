"""The planner's walk: statements to planned messages and request drafts.

Input: an `ir.Workload` that passed `check`, resolved param values (`evaluate.resolve_params`), a
salt, the environment (`max_context`: the engine's context limit, or None), `Limits` and the
traces its sessions replay (loaded by the caller: the planner reads no file).
Output: through `build_plan` (`plan/assemble.py`), a `plan.model.Plan`, or `WorkloadError` with
every plan-time diagnostic (WL4xx).

No I/O, no clock, no global RNG: the same inputs give byte-identical plans and the same hash.
Messages are made once and name the message they follow, so a conversation that forks or is
re-sent shares its messages by reference; a request is drafted here and its `expected_cached`
filled in afterwards by replaying the plan against a perfect prefix cache (`prefix.py`). The
planner's state and the plan-time values of expressions are `builder.py`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

from workloadlang import ir
from workloadlang.evaluate import is_number
from workloadlang.irexpr import refs_in
from workloadlang.plan import synth, texts
from workloadlang.plan.builder import (  # noqa: F401
    DEFAULT_HIT_RATIO,
    DEFAULT_TIMEOUT_S,
    Builder,
    Conv,
    Ctx,
    Draft,
    count,
    in_bounds,
    iterations,
    options_value,
    seconds,
    tokens,
    value,
)
from workloadlang.plan.dataplan import data_segs
from workloadlang.plan.model import BranchEnd, Expectation, Pick, Seg
from workloadlang.plan.prefix import CALL_ARG_TOKENS, CALL_TOKENS, GEN_PROMPT_TOKENS, Lane

# ---------------------------------------------------------------- statements


def walk(b: Builder, body: tuple[ir.Stmt, ...], ctx: Ctx, conv: Conv) -> None:
    for i, stmt in enumerate(body):
        STMT[stmt.kind](b, stmt, ctx.at(str(i)), conv)


def stmt_message(b: Builder, s: ir.Message, ctx: Ctx, conv: Conv) -> None:
    b.budget.text_parts(texts.parts(b, s.parts), "this message", s.span)
    segs = parts_segs(b, s.parts, ctx, f"{ctx.session}:{ctx.path}", conv)
    call_id = ""
    if s.role == "tool":
        if not conv.calls:
            b.error("WL430", "this `tool` message answers no tool call: no call of the "
                    "conversation's last assistant turn is left unanswered", s.span,
                    "a `tool` message follows `assistant call NAME { ... }` or `reply N call "
                    "NAME { ... }`, one per call")
        else:
            call_id, conv.calls = conv.calls[0], conv.calls[1:]
    b.append(conv, s.role, segs, sum(g.tokens for g in segs), s.span, call_id)


def parts_segs(b: Builder, parts: tuple[ir.ContentPart, ...], ctx: Ctx,
               key: str, conv: Conv | None = None) -> tuple[Seg, ...]:
    """A message's (or a named text's) parts as planned segments; `key` and the part's
    position name a filler (its text's key) or a call (its id); an earlier request's answer
    is a reply segment (`conv`'s next request then waits for that request)."""
    out: list[Seg] = []
    for j, p in enumerate(parts):
        if isinstance(p, ir.ExprPart):
            out.extend(expr_segs(b, p, ctx))
        elif isinstance(p, ir.ReplyPart):
            out.extend(reply_seg(b, p, ctx, conv))
        elif isinstance(p, ir.DataPart):
            size = None if p.tokens is None else tokens(b, p.tokens, ctx, "filler size")
            idx = None if p.index is None else count(b, p.index, ctx, "index")
            out.extend(data_segs(b, p, ctx.session, f"{key}/{j}", size, idx))
        else:
            out.append(part_seg(b, p, ctx, f"{key}/{j}"))
    return tuple(out)


def part_seg(b: Builder, p: ir.TextPart | ir.FillerPart | ir.CallPart, ctx: Ctx,
             key: str) -> Seg:
    """A literal, filler or call part as a planned segment; `key` names a filler (its text's
    key) or a call (its id)."""
    if isinstance(p, ir.CallPart):
        return call_seg(b, p, ctx, key)
    if isinstance(p, ir.TextPart):
        seg = b.texts.get(id(p))  # one segment per literal, however often it is sent
        if seg is None:
            seg = b.texts[id(p)] = texts.literal(b, p.value)
        return seg
    needle = None if p.needle_at is None else value(b, p.needle_at, ctx)
    depth = float(needle) if is_number(needle) else None  # checked: a ratio, if computed
    if depth is not None and p.needle_at is not None and not 0 <= depth <= 1:
        b.error("WL401", f"needle depth must lie in 0..1, got {needle}", p.needle_at.span)
    return Seg(kind="filler", key=key, tokens=tokens(b, p.tokens, ctx, "filler size"),
               needle_at=depth)


def expr_segs(b: Builder, p: ir.ExprPart, ctx: Ctx) -> tuple[Seg, ...]:
    """`$NAME` of a named text: its segments (made once, keyed by the text's name: the same
    bytes in every session); any other expression: its string as literal text."""
    if isinstance(p.value, ir.Ref) and p.value.name in b.declared:
        return named_text(b, p.value.name, ctx)
    v = value(b, p.value, ctx)
    if not isinstance(v, str):
        if v is not None:
            b.error("WL404", f"a message part must be a string, got {v!r}", p.span)
        return ()
    seg = b.strings.get(v)
    if seg is None:
        seg = b.strings[v] = texts.literal(b, v)
    return (seg,)


def reply_seg(b: Builder, p: ir.ReplyPart, ctx: Ctx, conv: Conv | None) -> tuple[Seg, ...]:
    """`reply NAME[INDEX]`: the answer of that earlier request of the session, its content
    only (a tool's result is what the sub-agent said), planned at the size it may generate."""
    idx = 0 if p.index is None else count(b, p.index, ctx, "index")
    rid = b.names.get((ctx.session, p.name), {}).get(idx)
    if rid is None or conv is None:
        b.error("WL404", f"`reply {p.name}[{idx}]` names no earlier request in {ctx.session}",
                p.span, "name the request with `as NAME` before the message that sends its "
                "answer")
        return ()
    src = b.drafts[b.by_id[rid]]
    if src.fields["kind"] == "probe":
        b.error("WL404", f"`reply {p.name}[{idx}]` names a probe, whose answer is not kept",
                p.span, "name a `reply` instead")
        return ()
    conv.needs = (*conv.needs, rid)
    return (Seg(kind="reply", key=rid, tokens=src.generated, content_only=True),)


def named_text(b: Builder, name: str, ctx: Ctx) -> tuple[Seg, ...]:
    """The segments of `text NAME = ...`, evaluated once with the params (its parts cannot
    read loop variables or `$copy`: `check`); the texts it reads are made first (the message
    that sends it counted their parts before: `texts.parts`)."""
    segs = b.named.get(name)
    if segs is None:
        for t in texts.needed(b, name, b.named):
            b.named[t] = parts_segs(b, b.declared[t].parts, ctx, f"text:{t}")
        segs = b.named[name]
    return segs


def call_seg(b: Builder, p: ir.CallPart, ctx: Ctx, key: str) -> Seg:
    """A tool call: its id (from the session and position, `key`, so the same in every
    re-send), its name, its arguments as segments, and its tokens (markup, keys and values)."""
    args = tuple((a.key, arg_seg(b, a.value, ctx, f"{key}/{j}"))
                 for j, a in enumerate(p.args))
    size = CALL_TOKENS + sum(CALL_ARG_TOKENS + seg.tokens for _, seg in args)
    return Seg(kind="call", key=call_id(key), text=p.name, args=args, tokens=size)


def arg_seg(b: Builder, p: ir.TextPart | ir.FillerPart | ir.ExprPart, ctx: Ctx,
            key: str) -> Seg:
    """A tool call's argument as one segment: a string that formats values into itself is
    its text."""
    if isinstance(p, ir.ExprPart):
        text = "".join(seg.text if seg.ref is None else b.text_table[seg.ref]
                       for seg in expr_segs(b, p, ctx))
        return texts.literal(b, text)
    return part_seg(b, p, ctx, key)


def call_id(key: str) -> str:
    """A tool call's id: 9 letters and digits (what the strictest templates accept)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:9]


def stmt_reply(b: Builder, s: ir.Reply, ctx: Ctx, conv: Conv) -> None:
    max_tokens = tokens(b, s.max_tokens, ctx, "max_tokens")
    in_bounds(b, "max_tokens", max_tokens, s.max_tokens.span)
    abort = None if s.abort_after is None else tokens(b, s.abort_after, ctx, "abort point")
    kept = "partial" if abort is not None and s.mode != "drop" else s.mode
    expect = tuple(expectation(b, e, conv) for e in s.expect)
    rid = add_request(b, s, ctx, conv, kind="reply", max_tokens=max_tokens, abort=abort,
                      kept=kept, options=options_value(b, s.options, ctx), expect=expect)
    if kept != "drop":
        size = abort if abort is not None else max_tokens
        seg = Seg(kind="partial" if kept == "partial" else "reply", key=rid,
                  tokens=size, synthetic=kept == "synthetic", content_only=s.mode == "content")
        calls = tuple(call_seg(b, c, ctx, f"{ctx.session}:{ctx.path}/call{j}")
                      for j, c in enumerate(s.calls))
        b.append(conv, "assistant", (seg, *calls), sum(c.tokens for c in calls), s.span)


def expectation(b: Builder, e: ir.Expect, conv: Conv) -> Expectation:
    if e.what == "text":
        return Expectation(what="text", text=e.text)
    idx = conv.last
    while idx is not None:
        for seg in b.messages[idx].segs:
            if seg.kind == "filler" and seg.needle_at is not None:
                return Expectation(what="needle", text=synth.needle_code(b.salt, seg.key))
        idx = b.messages[idx].after
    b.error("WL404", "`expect reply contains needle` but no filler in this conversation has a "
            "needle", e.span, hint="add `needle at DEPTH` to a filler before this reply")
    return Expectation(what="needle", text="")


def stmt_probe(b: Builder, s: ir.Probe, ctx: Ctx, conv: Conv) -> None:
    max_tokens = 1 if s.max_tokens is None else tokens(b, s.max_tokens, ctx, "max_tokens")
    in_bounds(b, "max_tokens", max_tokens, s.span)
    add_request(b, s, ctx, conv, kind="probe", max_tokens=max_tokens, abort=None, kept="drop",
                options=options_value(b, s.options, ctx), expect=(), warm=s.expect_cached)


def stmt_resend(b: Builder, s: ir.Resend, ctx: Ctx, conv: Conv) -> None:
    idx = 0 if s.index is None else count(b, s.index, ctx, "index")
    src_id = b.names.get((ctx.session, s.name), {}).get(idx)
    if src_id is None:
        b.error("WL404", f"`{s.name}[{idx}]` names no earlier request in {ctx.session}", s.span)
        return
    src = b.drafts[b.by_id[src_id]].fields
    max_tokens = (src["max_tokens"] if s.max_tokens is None
                  else tokens(b, s.max_tokens, ctx, "max_tokens"))
    in_bounds(b, "max_tokens", max_tokens, s.span)
    last = src["last_message"]
    again = Conv(last=last, tokens=0 if last is None else b.upto[last], last_request=src_id)
    add_request(b, s, ctx.replace(index=idx), again, kind="resend", max_tokens=max_tokens,
                abort=None, kept="drop", options=dict(src["options"]), expect=src["expect"],
                resend_of=src_id)


def stmt_wait(b: Builder, s: ir.Wait, ctx: Ctx, conv: Conv) -> None:
    """A pause before the session's next request: its duration (drawn when random) now, and
    the time to read the previous answer at `reading` tokens/s as seconds per token (known at
    run time, from the answer's length)."""
    key = (ctx.session, ctx.lane)
    if s.duration is not None:
        b.pending_wait[key] = b.pending_wait.get(key, 0.0) + seconds(b, s.duration, ctx)
    if s.reading is not None:
        rate = value(b, s.reading, ctx)
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and in_bounds(
                b, "reading", rate, s.reading.span):
            b.pending_read[key] = b.pending_read.get(key, 0.0) + 1 / rate


def stmt_turn(b: Builder, s: ir.Turn, ctx: Ctx, conv: Conv) -> None:
    walk(b, s.body, ctx.replace(label=s.name, isolated=ctx.isolated or s.isolated), conv)


def stmt_phase(b: Builder, s: ir.Phase, ctx: Ctx, conv: Conv) -> None:
    """A barrier across sessions before and after the body. Each time a session runs the
    statement (in a loop, a spawn, a second statement of the name) is a phase of its own: the
    k-th run is `NAME#k` after the first (`NAME`), in the plan's phases after the one before."""
    if ctx.phase:
        b.error("WL404", f"phase `{s.name}` is nested in phase `{ctx.phase}`", s.span)
    seen = b.phase_runs.get((ctx.session, s.name), 0)
    b.phase_runs[(ctx.session, s.name)] = seen + 1
    name = phase_instance(s.name, seen)
    if name not in b.phases:
        b.phases.append(name)
    walk(b, s.body, ctx.replace(phase=name), conv)


def phase_instance(name: str, k: int) -> str:
    """The name of the k-th run (from 0) of phase `name`: `grow`, `grow#1`, `grow#2`, ..."""
    return name if k == 0 else f"{name}#{k}"


def stmt_for(b: Builder, s: ir.For, ctx: Ctx, conv: Conv) -> None:
    if s.over is not None:
        items = value(b, s.over, ctx)
        items = items if isinstance(items, list) else []
        pairs = list(enumerate(items))
    else:
        assert s.low is not None and s.high is not None  # the grammar's other form: a range
        lo, hi = count(b, s.low, ctx, "loop bound"), count(b, s.high, ctx, "loop bound")
        b.budget.count(hi - lo, "the loop's count", s.span)
        pairs = [(i, i) for i in range(lo, hi)]
    if s.reverse:
        pairs.reverse()
    group = f"{ctx.session}:{ctx.path}" if s.until else None

    def one(pos: int) -> None:
        idx, val = pairs[pos]
        stop = (group, s.until, pos) if group else ctx.stop
        sub = ctx.at(f"{pos}", env={**ctx.env, s.var: val}, index=idx,
                     label=s.label or ctx.label, stop=stop, isolated=ctx.isolated or s.isolated)
        walk(b, s.body, sub, conv)

    guarded(b, conv, len(pairs), one, "the loop", s.span)


def stmt_repeat(b: Builder, s: ir.Repeat, ctx: Ctx, conv: Conv) -> None:
    n = iterations(b, s.count, ctx, "the repeat count")
    loop(b, s.body, isolating(ctx, s), conv, n, s.var, s.label, s.span)


def stmt_grow(b: Builder, s: ir.Grow, ctx: Ctx, conv: Conv) -> None:
    size, step = count(b, s.until, ctx, "grow size"), count(b, s.by, ctx, "grow step")
    if step <= 0:
        b.error("WL401", "grow step must be positive", s.by.span)
        return
    n = max(1, math.ceil(size / step))
    b.budget.count(n, f"the number of grow steps ({size:,} by {step:,})", s.span)
    loop(b, s.body, isolating(ctx, s), conv, n, s.var, s.label, s.span)


def isolating(ctx: Ctx, s: ir.Repeat | ir.Grow) -> Ctx:
    """Output: `ctx`, marked isolated when the block `s` is."""
    return ctx.replace(isolated=True) if s.isolated else ctx


def loop(b: Builder, body, ctx: Ctx, conv: Conv, n: int, var: str | None, label: str | None,
         span: ir.Span) -> None:
    def one(k: int) -> None:
        env = {**ctx.env, var: k} if var else ctx.env
        walk(b, body, ctx.at(str(k), env=env, index=k, label=label or ctx.label), conv)

    guarded(b, conv, n, one, "the loop", span)


def guarded(b: Builder, conv: Conv, n: int, one, what: str, span: ir.Span) -> None:
    """Run `one(k)` for k in 0..n-1, counting each iteration against the limits; after the
    first, refuse the loop when n iterations like it would pass a limit (`Budget.project`)."""
    before = b.budget.snapshot(conv.tokens)
    first_draft = len(b.drafts)
    for k in range(n):
        b.budget.step(span)
        one(k)
        if k == 0 and n > 1:
            largest = max((d.fields["prompt_tokens"] + d.fields["max_tokens"]
                           for d in b.drafts[first_draft:]), default=0)
            b.budget.project(before, conv.tokens, largest, n, what, span)


def stmt_spawn(b: Builder, s: ir.Spawn, ctx: Ctx, conv: Conv) -> None:
    """N branches, one after another or (`parallel`) each in its own lane of the session,
    which the requests after the spawn wait for every one of; then `keep`."""
    fork = s.mode == "fork"
    n = iterations(b, s.count, ctx, "the spawn count")
    fid = None
    if s.parallel:
        fid, b.forks = b.forks, b.forks + 1
    home = (ctx.session, ctx.lane)
    start = (b.last_in_lane.get(home), b.frontier.get(home, ()))
    ends: list[Conv] = []
    lanes: list[Lane] = []

    def one(k: int) -> None:
        env = {**ctx.env, s.var: k} if s.var else ctx.env
        # a fork's first request also sends what the parent added since its last request
        child = Conv(last=conv.last if fork else None, tokens=conv.tokens if fork else 0,
                     last_request=conv.last_request if fork else None,
                     calls=conv.calls if fork else (), new_tokens=conv.new_tokens if fork else 0,
                     needs=conv.needs if fork else ())
        sub = ctx.at(str(k), env=env, index=k, label=s.label or ctx.label,
                     isolated=ctx.isolated or s.isolated)
        if fid is not None:
            sub = sub.replace(lane=ctx.lane + ((fid, k),))
            lanes.append(sub.lane)
            b.last_in_lane[(ctx.session, sub.lane)], b.frontier[(ctx.session, sub.lane)] = start
        walk(b, s.body, sub, child)
        ends.append(child)

    guarded(b, conv, n, one, "the spawn", s.span)
    if fid is not None:
        join(b, ctx, lanes, start)
    if s.keep is not None and ends:
        keep(b, s, ctx, conv, ends)


def join(b: Builder, ctx: Ctx, lanes: list[Lane], start: tuple[str | None, tuple[str, ...]]
         ) -> None:
    """After a parallel fork: the session's lane goes on once every branch has ended (its next
    request waits for each branch's last request), after the longest wait a branch ended with;
    its last request is the last branch's (in plan order, as after a spawn one after another)."""
    home, waits = (ctx.session, ctx.lane), [0.0]
    frontier: list[str] = []
    for lane in lanes:
        key = (ctx.session, lane)
        frontier.extend(b.frontier.pop(key, start[1]))
        waits.append(b.pending_wait.pop(key, 0.0))
        last = b.last_in_lane.pop(key, None)
        if last is not None:
            b.last_in_lane[home] = last
    b.frontier[home] = tuple(dict.fromkeys(frontier))
    if max(waits):
        b.pending_wait[home] = b.pending_wait.get(home, 0.0) + max(waits)


def keep(b: Builder, s: ir.Spawn, ctx: Ctx, conv: Conv, ends: list[Conv]) -> None:
    """`keep`: the parent goes on from a branch's conversation: the one at an index (known
    now), or, chosen at run time, through a `join` message that stands for the kept branch's
    conversation (the plan counts branch 0's)."""
    assert s.keep is not None
    if s.keep.rule == "index":
        assert s.keep.index is not None  # `keep INDEX` has one
        k = count(b, s.keep.index, ctx, "the branch to keep")
        if k >= len(ends):
            b.error("WL431", f"`keep {k}` names no branch: the spawn has {len(ends)} (0 to "
                    f"{len(ends) - 1})", s.keep.span)
            return
        chosen = ends[k]
    else:
        b.picks.append(Pick(session=ctx.session, rule=s.keep.rule, span=s.keep.span,
                            branches=tuple(BranchEnd(last_message=e.last,
                                                     last_request=e.last_request)
                                           for e in ends)))
        chosen = Conv(**vars(ends[0]))
        b.append(chosen, "join", (), 0, s.keep.span, pick=len(b.picks) - 1)
    conv.last, conv.tokens, conv.last_request = chosen.last, chosen.tokens, chosen.last_request
    conv.new_tokens, conv.calls = chosen.new_tokens, chosen.calls


def lane_text(lane: Lane) -> str:
    """A lane as `FORK.BRANCH/FORK.BRANCH` (empty outside parallel forks)."""
    return "/".join(f"{f}.{k}" for f, k in lane)


def stmt_fresh(b: Builder, s: ir.Fresh, ctx: Ctx, conv: Conv) -> None:
    walk(b, s.body, ctx.replace(label=s.label or ctx.label,
                            isolated=ctx.isolated or s.isolated), Conv())


def stmt_if(b: Builder, s: ir.If, ctx: Ctx, conv: Conv) -> None:
    cond = value(b, s.cond, ctx)
    walk(b, s.then, ctx.at("then"), conv) if cond else walk(b, s.orelse, ctx.at("else"), conv)


STMT: dict[str, Callable[..., None]] = {
    "message": stmt_message, "reply": stmt_reply, "probe": stmt_probe, "resend": stmt_resend,
    "wait": stmt_wait, "turn": stmt_turn, "phase": stmt_phase, "for": stmt_for,
    "repeat": stmt_repeat, "grow": stmt_grow, "spawn": stmt_spawn, "fresh": stmt_fresh,
    "if": stmt_if,
}


# ---------------------------------------------------------------- requests


def request_id(b: Builder, ctx: Ctx, label: str) -> str:
    base = f"{ctx.session}/{ctx.phase + '/' if ctx.phase else ''}{label}/{ctx.index}"
    rid = base
    if rid in b.by_id:
        k = b.id_next.get(base, 1)
        rid = f"{base}.{k}"
        while rid in b.by_id:
            k += 1
            rid = f"{base}.{k}"
        b.id_next[base] = k + 1
    return rid


def add_request(b: Builder, s, ctx: Ctx, conv: Conv, *, kind, max_tokens, abort, kept,
                options, expect, resend_of: str | None = None, group: str | None = None,
                send_at: float | None = None, warm: bool = False) -> str:
    """Draft one request sending `conv` as it is now (`group`: who it runs in order with, by
    default its session; `send_at`: its planned send time; `warm`: its prompt was sent before
    the run). Output: its id."""
    label = getattr(s, "label", None) or ctx.label or kind
    rid = request_id(b, ctx, label)
    budget = getattr(s, "max_tokens", None)
    if budget is not None:
        b.budget_params[rid] = tuple(sorted(refs_in(budget) & b.param_names))
    prompt = conv.tokens + GEN_PROMPT_TOKENS
    b.budget.request(rid, prompt, max_tokens, s.span)
    lane = (ctx.session, ctx.lane)
    last_in_lane = b.last_in_lane.get(lane)
    deps = tuple(dict.fromkeys(d for d in (*b.frontier.get(lane, ()), conv.last_request,
                                           *conv.needs) if d))
    stop_group, stop_on, stop_iter = ctx.stop if ctx.stop else (None, None, None)
    fields = dict(
        id=rid, seq=len(b.drafts), session=ctx.session, session_name=ctx.session_name,
        copy_index=ctx.copy, phase=ctx.phase, label=label, index=ctx.index, kind=kind,
        name=getattr(s, "name", None) if kind != "resend" else None, deps=deps,
        last_message=conv.last, new_tokens=conv.new_tokens, prompt_tokens=prompt,
        max_tokens=max_tokens, abort_after=abort, reply_kept=kept,
        options={**b.options, **options} if options else b.options, expect=expect,
        stop_group=stop_group, stop_on=stop_on, stop_iter=stop_iter,
        wait_before=b.pending_wait.pop(lane, 0.0),
        wait_per_token=b.pending_read.pop(lane, None),
        isolated=ctx.isolated or getattr(s, "isolated", False), send_at=send_at,
        lane=lane_text(ctx.lane), span=s.span)
    generated = abort if abort is not None else max_tokens
    candidates = tuple(c for c in dict.fromkeys((conv.last_request, last_in_lane)) if c)
    b.by_id[rid] = len(b.drafts)
    b.drafts.append(Draft(fields, group or ctx.session, candidates, resend_of, generated,
                          ctx.lane, warm))
    b.last_in_lane[lane], b.frontier[lane] = rid, (rid,)
    conv.last_request, conv.new_tokens, conv.needs = rid, 0, ()
    name = fields["name"]
    if name:
        b.names.setdefault((ctx.session, name), {})[ctx.index] = rid
    return rid
