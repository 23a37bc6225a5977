"""Ranges over values: a number known only to lie in an interval, and the arithmetic, the
aggregates and the comparisons the gates judge them with.

Input: plain values and `Span`s (a first-token stamp that may be late, a prefill that may hold
other requests' work or a machine that ran slower for it). Output: values and `Span`s, and for a
comparison True, False or None (it holds for some of the values the ranges allow and not for
others). `Unknown` is raised where a value cannot be had at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any, NamedTuple

from workloadlang import latency


class Span(NamedTuple):
    """A number known only to lie in [lo, hi], with its value as stamped (`at`, the one
    reported)."""
    lo: float
    hi: float
    at: float


# yes/no metrics: an unknown one may be either
BOOLEAN = frozenset({"hit", "miss", "error", "aborted", "ok", "cold_ok", "cached_reported",
                     "ttft_agrees", "ttft_disagrees", "slo_met"})


def unknown_value(metric: str) -> Span:
    """Output: every value an unknown `metric` could have had (no value as stamped): either
    answer for a yes/no metric, 0..1 for `reuse`, else any non-negative number. A gate over
    it is judged only when every such value judges the same."""
    if metric in BOOLEAN:
        return Span(False, True, None)  # type: ignore[arg-type]
    return Span(0.0, 1.0 if metric == "reuse" else math.inf, None)  # type: ignore[arg-type]


def ends(v: Any) -> tuple[Any, Any]:
    """Output: (lowest, highest) of a `Span`, or the value twice."""
    return (v.lo, v.hi) if isinstance(v, Span) else (v, v)


def stamped(v: Any) -> Any:
    """Output: a `Span`'s value as stamped, or the value itself."""
    return v.at if isinstance(v, Span) else v


def span_of(lo: Any, hi: Any, at: Any) -> Any:
    """Output: `Span(lo, hi, at)`, or just `at` when the range is one point."""
    return at if lo == hi else Span(lo, hi, at)


class Unknown(Exception):
    """A value that cannot be judged (no data, or the engine did not report it)."""


def arith(op: str, a: Any, b: Any) -> Any:
    """Output: `a op b`; over `Span`s, the range of every result the operands' ranges allow."""
    if not isinstance(a, Span) and not isinstance(b, Span):
        return _arith(op, a, b)
    (alo, ahi), (blo, bhi) = ends(a), ends(b)
    if op == "/" and blo <= 0 <= bhi:
        raise Unknown("division by a value that may be zero")
    corners = [_arith(op, x, y) for x in (alo, ahi) for y in (blo, bhi)]
    if any(c != c for c in corners):  # NaN: an unbounded end met another (inf - inf)
        raise Unknown("a range without bounds (a prefill that may have taken no time of its "
                      "own: a late stamp, or all of it other requests' time)")
    return span_of(min(corners), max(corners), _arith(op, stamped(a), stamped(b)))


def _arith(op: str, a: Any, b: Any) -> Any:
    if op == "/" and b == 0:
        raise Unknown("division by zero")
    return {"+": a + b, "-": a - b, "*": a * b}.get(op) if op != "/" else a / b


def aggregate(func: str, vals: list[Any]) -> Any:
    """Aggregate the known values; booleans count True; unknown when nothing is known. Numeric
    aggregates are monotone in every value: over `Span`s, the aggregate of the lowest ends to
    that of the highest."""
    if any(isinstance(v, Span) for v in vals):
        los = [None if v is None else ends(v)[0] for v in vals]
        his = [None if v is None else ends(v)[1] for v in vals]
        return span_of(aggregate(func, los), aggregate(func, his),
                       aggregate(func, [stamped(v) for v in vals]))
    if func == "count":
        return sum(1 for v in vals if v is not None and v is not False)
    xs = [v for v in vals if v is not None]
    if not xs:
        raise Unknown("no data" if not vals else "no reported values")
    if func in ("all", "any"):
        return all(xs) if func == "all" else any(xs)
    if func == "fraction":
        return sum(1 for v in xs if v) / len(xs)
    nums = [float(v) for v in xs]
    if func in ("p50", "p90", "p95", "p99"):
        return latency.quantile(sorted(nums), int(func[1:]) / 100)
    pick: dict[str, Callable[[list[float]], float]] = {
        "median": statistics.median, "mean": statistics.fmean, "min": min, "max": max,
        "sum": math.fsum}
    return pick[func](nums)


CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def compare(op: str, a: Any, b: Any) -> bool | None:
    """Output: `a op b`; over `Span`s, True or False when it holds for every value the ranges
    allow or for none, None when it holds for some and not others."""
    if not isinstance(a, Span) and not isinstance(b, Span):
        return CMP[op](a, b)
    (alo, ahi), (blo, bhi) = ends(a), ends(b)
    if op in ("==", "!="):
        apart = ahi < blo or bhi < alo
        equal = alo == ahi == blo == bhi
        same = True if equal else False if apart else None
        return same if same is None or op == "==" else not same
    if op in ("<", "<="):
        always, ever = CMP[op](ahi, blo), CMP[op](alo, bhi)
    else:
        always, ever = CMP[op](alo, bhi), CMP[op](ahi, blo)
    return True if always else False if not ever else None
