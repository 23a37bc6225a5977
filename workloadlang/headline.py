"""The headline numbers of one run's results, and how a number is shown.

Input: a `results.Results`. Output: `headline`: ordered `name -> (kind, value)`: the report
items (a per-group item as `name[group]`, of the kind their `as` format says), then the run's
own figures (requests, errors, warm hits and misses, mean reuse, median TTFTs, tokens, the
engine's hit ratio, elapsed, then its latency percentiles, rates and goodput); `fmt_value`: a
value as a table cell. `wl compare` sets two runs' side by side, a sweep's table and curves its
points'.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Literal

from workloadlang.console.format import fmt_number
from workloadlang.results import Results

Kind = Literal["count", "ratio", "seconds", "number"]


REPORT_KINDS: dict[str, Kind] = {"percent": "ratio", "tokens": "count", "seconds": "seconds",
                                 "number": "number"}
"""A report item's `as` format -> the kind its value is shown as."""


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def headline(r: Results) -> dict[str, tuple[Kind, Any]]:
    """Input: one results. Output: ordered `name -> (kind, value)`: the report items (a per-group
    item expanded as `name[group]`), then the run's own figures."""
    out: dict[str, tuple[Kind, Any]] = {}
    for name, v in r.report.items():
        kind = REPORT_KINDS.get(r.report_format.get(name, "number"), "number")
        if isinstance(v, dict):
            for group, x in v.items():
                out[f"{name}[{group}]"] = (kind, x)
        else:
            out[name] = (kind, v)
    ran = [x for x in r.records if not x.skipped]
    ok = [x for x in ran if x.error is None]
    warm = [x for x in ok if x.warm]
    reuse = [x.reuse for x in warm if x.reuse is not None]
    out.update({
        "requests": ("count", len(ran)),
        "skipped": ("count", len(r.records) - len(ran)),
        "errors": ("count", len(ran) - len(ok)),
        "warm hits": ("count", sum(x.hit is True for x in warm)),
        "warm misses": ("count", sum(x.hit is False for x in warm)),
        "warm unknown": ("count", sum(x.hit is None for x in warm)),
        "warm mean reuse": ("ratio", sum(reuse) / len(reuse) if reuse else None),
        "warm median ttft": ("seconds", median([x.ttft_s for x in warm if x.ttft_s is not None])),
        "cold median ttft": ("seconds", median([x.ttft_s for x in ok if not x.warm
                                                 and x.ttft_s is not None])),
        "prompt tokens": ("count", sum(x.prompt_tokens or 0 for x in ok)),
        "cached tokens": ("count", sum(x.cached_tokens or 0 for x in ok)),
        "engine hit ratio": ("ratio", r.metrics.engine_hit_ratio),
        "elapsed": ("seconds", r.elapsed_s),
    })
    out.update(performance(r))
    return out


def performance(r: Results) -> dict[str, tuple[Kind, Any]]:
    """Output: the run's latency, throughput and goodput figures (`Results.performance`; none
    for a results file without them)."""
    p = r.performance
    if p is None:
        return {}
    out: dict[str, tuple[Kind, Any]] = {
        "request rate": ("number", p.request_rate), "output tokens/s": ("number", p.output_tps)}
    for key in ("ttft", "itl", "tpot", "e2e"):
        s = getattr(p, key)
        for q in ("p50", "p99"):
            out[f"{key} {q}"] = ("seconds", None if s is None else getattr(s, q))
    g = p.goodput
    out["hit rate (measured)"] = ("ratio", p.hit_rate)
    if g is not None:
        out.update({"goodput": ("number", g.rate), "slo attainment": ("ratio", g.attainment)})
    return out


def numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt_value(kind: Kind, v: Any) -> str:
    """Input: a kind and a value. Output: its cell; 0 prints as 0, None as `–`."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not numeric(v):
        return str(v).lower() if isinstance(v, bool) else str(v)
    if v == 0:
        return "0"
    if kind == "ratio":
        return f"{100 * v:.1f}%"
    if kind == "seconds":
        if abs(v) < 1e-3:  # an inter-token gap: in microseconds, or it would print as 0.000s
            return f"{v * 1e6:.0f}µs"
        return f"{v:.3f}s" if abs(v) < 100 else f"{v:.1f}s"
    return fmt_number(round(v) if kind == "count" else v)
