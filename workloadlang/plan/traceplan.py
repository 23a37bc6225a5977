"""Trace sessions: each request of a trace as a planned request.

Input: the planner's `Builder`, a `session NAME trace PATH { ... }` (`ir.Session` with `trace`),
the root context (params) and the `tracefile.Trace` the caller loaded for it. Output: the session
copies (one per session of the trace, `NAME#k` in order of their first request) as
`SessionInfo`s, the `TraceInfo` the plan carries, and one drafted request per trace record.

A record's prompt is one user message made of its blocks: filler text named by the session and
the block's id, so equal ids give byte-identical text and equal leading ids an equal prefix; the
last block is cut to the prompt's size (and named with its size: it shares only with the same
cut). `max_tokens` is the record's output length (at most the `max_tokens` option), the send
time its time times `time_scale` (0: no send time, so no schedule lag: each is sent as soon as
its session's turn before it and the concurrency allow, in the trace's order). `block_tokens`
scales every block (and so every prompt) to that many tokens, keeping which prompts share what.
Every trace request is in one group for the cache model: the trace's send order is assumed to be
the order requests finish (`prefix.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workloadlang import ir
from workloadlang.plan.model import Seg, SessionInfo, TraceInfo
from workloadlang.plan.planner import Builder, Conv, Ctx, add_request, value
from workloadlang.plan.prefix import GEN_PROMPT_TOKENS

TRACE_GROUP = "trace"  # the cache model's group of every trace request


@dataclass(frozen=True)
class TraceStmt:
    """What `add_request` reads of the statement behind a trace request."""

    span: ir.Span
    label: str


def options(b: Builder, s: ir.Session, root: Ctx, block: int) -> dict[str, Any] | None:
    """The trace options the planner uses, checked: time_scale, block_tokens, max_tokens,
    label. None (with diagnostics) when one is out of range."""
    assert s.trace is not None  # a trace session's
    got = {o.key: (value(b, o.value, root), o.value.span) for o in s.trace.options}
    out: dict[str, Any] = {"time_scale": 1.0, "block_tokens": block, "max_tokens": 0, "label": s.name}
    for key, (v, span) in got.items():
        if key not in out:
            continue
        if key == "label":
            if not isinstance(v, str) or not v.isidentifier():
                b.error("WL404", f"the trace option `label` must be a name, got {v!r}", span)
                return None
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf \
                or (key != "time_scale" and v != int(v)):
            b.error("WL404", f"the trace option `{key}` must be a "
                    f"{'number' if key == 'time_scale' else 'whole number'} of at least 0, "
                    f"got {v!r}", span)
            return None
        out[key] = v if key in ("time_scale", "label") else int(v) or out[key]
    out["time_scale"] = float(out["time_scale"])
    return out


def block_segs(b: Builder, name: str, blocks: tuple, tokens: int, trace_block: int,
               block: int, cache: dict, span: ir.Span) -> tuple[Seg, ...]:
    """The prompt's blocks as filler segments of `block` tokens, the last cut to its share."""
    last = tokens - trace_block * (len(blocks) - 1)
    cut = block if last == trace_block else max(1, math.ceil(last * block / trace_block))
    segs = [cache.get((bid, block)) or new_block(b, name, bid, block, cache, span)
            for bid in blocks[:-1]]
    segs.append(cache.get((blocks[-1], cut)) or new_block(b, name, blocks[-1], cut, cache, span))
    return tuple(segs)


def new_block(b: Builder, name: str, bid: Any, n: int, cache: dict, span: ir.Span) -> Seg:
    """The segment of block `bid` cut to `n` tokens (a full block's key is its id alone)."""
    b.budget.size(n, "a trace block", span)
    seg = cache[(bid, n)] = Seg(kind="filler", key=f"{name}:{bid}" if n == cache["block"]
                                else f"{name}:{bid}/{n}", tokens=n)
    return seg


def plan_trace(b: Builder, s: ir.Session, root: Ctx,
               trace: Any) -> tuple[TraceInfo | None, list[SessionInfo]]:
    """Draft every request of `trace` for trace session `s`."""
    src = s.trace
    assert src is not None  # a trace session's
    if trace is None:
        b.error("WL409", f"session `{s.name}` replays a trace, but no trace was read for it",
                src.span, hint="plan it through `api.make_plan`, which reads the file")
        return None, []
    opts = options(b, s, root, trace.block_tokens)
    if opts is None:
        return None, []
    stmt = TraceStmt(span=src.span, label=opts["label"])
    cache: dict = {"block": opts["block_tokens"]}
    count = [0] * trace.sessions
    peak = [0] * trace.sessions
    for rec in trace.records:
        sid = f"{s.name}#{rec.session}"
        ctx = root.replace(session=sid, session_name=s.name, copy=rec.session,
                           label=opts["label"], index=rec.number, path=sid)
        conv = Conv()
        segs = block_segs(b, s.name, rec.blocks, rec.input_tokens, trace.block_tokens,
                          opts["block_tokens"], cache, src.span)
        b.append(conv, "user", segs, sum(g.tokens for g in segs), src.span)
        out = min(rec.output_tokens, opts["max_tokens"] or rec.output_tokens)
        b.budget.size(out, "an output length", src.span)
        add_request(b, stmt, ctx, conv, kind="reply", max_tokens=out, abort=None, kept="drop",
                    options={}, expect=(), group=TRACE_GROUP,
                    send_at=rec.t * opts["time_scale"] if opts["time_scale"] else None)
        count[rec.session] += 1
        peak[rec.session] = max(peak[rec.session], conv.tokens + GEN_PROMPT_TOKENS + out)
    sessions = [SessionInfo(id=f"{s.name}#{k}", name=s.name, copy_index=k, requests=count[k],
                            peak_tokens=peak[k]) for k in range(trace.sessions)]
    info = TraceInfo(session=s.name, path=trace.path, format=trace.format, sha256=trace.sha256,
                     records=trace.records_total, selected=len(trace.records),
                     sessions=trace.sessions, block_tokens=opts["block_tokens"],
                     time_scale=opts["time_scale"])
    return info, sessions
