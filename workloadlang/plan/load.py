"""The load a plan makes over time: turns sent at a rate, the run's duration and its windows,
its SLOs.

Input: the planner's `Builder` (its drafts, after the sessions are walked), an `ir.Workload`
and the root context (params). Output:
- `turns`: the requests of a session with `turns every GAP` get planned send times: the
  instants of an arrival process (a gap drawn per instant from the salt, as `arrive every`
  draws its), the session's copies taking them in turn (copy 0's first request the first
  instant, copy 1's the second, ..., then copy 0's second request), so the requests of all
  copies together arrive at the rate and each copy's stay in order;
- `windows`: the run's `duration`, `warmup` and `cooldown` in seconds (WL401 when the windows
  leave nothing of the duration);
- `cut`: with a duration, every request planned to be sent at or after it is left out, with
  what follows it in its session copy (an open-loop schedule past the run's end);
- `slo`: the `slo { }` bounds as a `results.Slo`.
"""

from __future__ import annotations

from typing import Any

from workloadlang import ir
from workloadlang.evaluate import is_number
from workloadlang.plan.builder import Builder, Ctx, Draft, in_bounds, value
from workloadlang.plan.model import SessionInfo
from workloadlang.results import Slo


def turns(b: Builder, s: ir.Session, root: Ctx, first: int) -> None:
    """Give the drafts from index `first` on (the copies of session `s`, just walked) their
    send times, when `s` has `turns every GAP`."""
    if s.turns is None:
        return
    queues: dict[str, list[dict[str, Any]]] = {}
    for d in b.drafts[first:]:
        queues.setdefault(d.fields["session"], []).append(d.fields)
    order = [f for f in round_robin(list(queues.values()))]
    t = 0.0
    for j, fields in enumerate(order):
        if j:
            gap = value(b, s.turns, root.replace(path=f"{s.name}/turns/{j}"))
            if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not in_bounds(
                    b, "turns every", gap, s.turns.span):
                return
            t = round(t + gap, 9)
        fields["send_at"] = t


def round_robin(queues: list[list[Any]]) -> list[Any]:
    """Output: the queues' items taken in turn, one from each queue that still has one."""
    out: list[Any] = []
    k = 0
    while any(k < len(q) for q in queues):
        out.extend(q[k] for q in queues if k < len(q))
        k += 1
    return out


def windows(b: Builder, wl: ir.Workload, root: Ctx) -> dict[str, float | None]:
    """Output: `duration_s`, `warmup_s`, `cooldown_s` (None when not set), checked (WL401)."""
    out: dict[str, float | None] = {}
    for name in ("duration", "warmup", "cooldown"):
        expr = getattr(wl.settings, name)
        v = None if expr is None else value(b, expr, root)
        if expr is not None and is_number(v) and in_bounds(b, name, v, expr.span):
            out[f"{name}_s"] = float(v)
        else:
            out[f"{name}_s"] = None
    total, edges = out["duration_s"], (out["warmup_s"] or 0) + (out["cooldown_s"] or 0)
    duration = wl.settings.duration
    if total is not None and duration is not None and edges and edges >= total:
        b.error("WL401", f"`warmup` and `cooldown` ({edges:g}s) leave nothing of the "
                f"`duration` ({total:g}s) to measure", duration.span)
    return out


def cut(b: Builder, sessions: list[SessionInfo], duration: float | None) -> list[SessionInfo]:
    """With a `duration`: leave out every draft planned to be sent at or after it, and what
    follows it in its session copy. Output: the session copies with their counts of requests
    (a copy left with none is left out)."""
    if duration is None:
        return sessions
    over: set[str] = set()
    kept: list[Draft] = []
    for d in b.drafts:
        f = d.fields
        if f["session"] in over or (f["send_at"] is not None and f["send_at"] >= duration):
            over.add(f["session"])
            b.by_id.pop(f["id"], None)
            continue
        f["seq"] = len(kept)
        b.by_id[f["id"]] = len(kept)
        kept.append(d)
    if len(kept) == len(b.drafts):
        return sessions
    b.drafts = kept
    counts: dict[str, int] = {}
    for d in kept:
        counts[d.fields["session"]] = counts.get(d.fields["session"], 0) + 1
    return [s.model_copy(update={"requests": counts[s.id]}) for s in sessions if s.id in counts]


def slo(b: Builder, wl: ir.Workload, root: Ctx) -> Slo | None:
    """Output: the workload's SLOs (None without `slo { }`), each bound checked (WL401)."""
    if not wl.slo:
        return None
    found: dict[str, float] = {}
    for o in wl.slo:
        v = value(b, o.value, root)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and in_bounds(
                b, f"slo {o.key}", v, o.value.span):
            found[o.key if o.key == "attainment" else f"{o.key}_s"] = float(v)
    return Slo(**found)
