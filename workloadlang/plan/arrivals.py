"""When each copy of a session starts: `arrive every GAP [burst K]`, `arrive at TIMES`, and
the session's `concurrency` cap.

Input: the planner's `Builder`, an `ir.Session`, the root context (params). Output: the number
of copies, each copy's planned start in seconds from the run's start (None: all at the start,
as without `arrive`) and the cap (None: no cap), with WL401/WL404 diagnostics on the builder.

`every`: copy 0 (with `burst K`, copies 0..K-1) starts at 0, each next copy (group of K) one gap
later; a random gap is drawn per gap from the salt (`exponential(1s / RATE)` is a Poisson
process of RATE arrivals per second; `gamma(MEAN, CV)` a gamma renewal process), so the same
salt plans the same starts. `at`: one time per copy (a list: as many copies as times unless
`repeat` says otherwise, then the lengths must agree), or one time for every copy.
"""

from __future__ import annotations

import math

from workloadlang import ir
from workloadlang.plan.builder import Builder, Ctx, in_bounds, iterations, value


def copies(b: Builder, s: ir.Session, root: Ctx) -> tuple[int, list[float] | None]:
    """The session's number of copies and their starts (None without `arrive`)."""
    n = None if s.repeat is None else iterations(b, s.repeat, root, "the session repeat")
    a = s.arrive
    if a is None:
        return (1 if n is None else n), None
    if a.how == "at":
        return times_at(b, s, a, root, n)
    n = 1 if n is None else n
    return n, times_every(b, s, a, root, n)


def times_every(b: Builder, s: ir.Session, a: ir.Arrival, root: Ctx, n: int) -> list[float]:
    """Starts of `n` copies arriving `every GAP [burst K]`: group j of K at the sum of the
    first j gaps."""
    burst = 1 if a.burst is None else iterations(b, a.burst, root, "the burst")
    burst = max(1, burst)
    out: list[float] = []
    t = 0.0
    for j in range(math.ceil(n / burst)):
        if j:
            gap = value(b, a.value, root.replace(path=f"{s.name}/arrive/{j}"))
            if not isinstance(gap, (int, float)) or isinstance(gap, bool) or not in_bounds(
                    b, "arrive every", gap, a.value.span):
                return []
            t = round(t + gap, 9)
        out.extend([t] * min(burst, n - len(out)))
    return out


def times_at(b: Builder, s: ir.Session, a: ir.Arrival, root: Ctx,
             n: int | None) -> tuple[int, list[float]]:
    """Starts of the copies arriving `at TIMES`."""
    v = value(b, a.value, root)
    items = v if isinstance(v, list) else [v] * (1 if n is None else n)
    if n is not None and len(items) != n:
        b.error("WL404", f"`arrive at` lists {len(items)} time(s) for {n} copies of session "
                f"`{s.name}`", a.value.span, "give one time per copy, or leave out `repeat`")
        return n, [0.0] * n
    out = []
    for t in items:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
            b.error("WL401", f"an arrival time must be a duration of at least 0s, got {t!r}",
                    a.value.span)
            return len(items), [0.0] * len(items)
        out.append(float(t))
    return len(out), out


def cap(b: Builder, s: ir.Session, root: Ctx) -> int | None:
    """The session's `concurrency` cap, checked (at least 1), or None."""
    if s.concurrency is None:
        return None
    n = value(b, s.concurrency, root)
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return None
    return int(n) if in_bounds(b, "concurrency", n, s.concurrency.span) else None
