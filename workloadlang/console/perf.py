"""A run's latency, throughput and goodput as a person reads them at the end of `wl run`.

Input: the results' `Performance` (`latency.performance`). Output: lines of text: the percentiles of TTFT, ITL, TPOT and
end-to-end latency, the rates and the concurrency reached, and the goodput next to the cache
hit rate (docs/metrics.md).
"""

from __future__ import annotations

from tabulate import tabulate

from workloadlang.console.format import fmt_pct
from workloadlang.results import Performance, Slo, Spread

ROWS = (("ttft", "TTFT"), ("itl", "ITL (every gap)"), ("tpot", "TPOT"), ("e2e", "E2E latency"))


def fmt_latency(v: float | None) -> str:
    """A time in the unit that shows its digits: `93µs`, `2.74ms`, `1.23s`."""
    if v is None:
        return "–"
    if v < 1e-3:
        return f"{v * 1e6:.0f}µs"
    return f"{v * 1e3:.3g}ms" if v < 1 else f"{v:.3g}s" if v < 100 else f"{v:.0f}s"


def fmt_rate(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f} {unit}" if v >= 100 else f"{v:.3g} {unit}"


def spread_rows(perf: Performance) -> list[list[str]]:
    """One row per latency metric with data: its name, count, percentiles, mean and max."""
    rows = []
    for key, name in ROWS:
        s: Spread | None = getattr(perf, key)
        if s is not None:
            rows.append([name, f"{s.n:,}", *(fmt_latency(getattr(s, q)) for q in
                                             ("p50", "p90", "p95", "p99", "mean", "max"))])
    return rows


def slo_text(slo: Slo) -> str:
    """`ttft ≤ 2s, tpot ≤ 50ms`: the bounds of the SLOs."""
    bounds = [(name, getattr(slo, f"{name}_s")) for name in ("ttft", "tpot", "e2e")]
    return ", ".join(f"{name} ≤ {fmt_latency(v)}" for name, v in bounds if v is not None)


def goodput_line(perf: Performance) -> str:
    """The goodput next to the cache hit rate of the same requests (what engine teams
    compare)."""
    cache = f"cache hit rate {fmt_pct(perf.hit_rate)} of prompt tokens"
    g = perf.goodput
    if g is None:
        return f"{cache} · goodput: no SLO declared (`slo {{ ttft = 2s, ... }}`)"
    verdict = "" if g.sustained is None else (
        f", {'at least' if g.sustained else 'under'} the {fmt_pct(g.slo.attainment)} asked")
    return (f"{cache} · goodput {fmt_rate(g.rate, 'req/s')}: {g.met:,} of {g.judged:,} "
            f"requests ({fmt_pct(g.attainment)}) met {slo_text(g.slo)}{verdict}")


def performance_text(perf: Performance | None) -> list[str]:
    """Output: the lines of the performance section (none without a measured request)."""
    if perf is None or not perf.requests:
        return []
    left = f", {perf.excluded:,} in the warm-up or cool-down left out" if perf.excluded else ""
    window = f" over {perf.window_s:.1f}s" if perf.window_s else ""
    head = f"── latency and throughput: {perf.requests:,} measured request(s){window}{left} ──"
    rows = spread_rows(perf)
    table = tabulate(rows, headers=["", "n", "p50", "p90", "p95", "p99", "mean", "max"],
                     tablefmt="simple", disable_numparse=True) if rows else "(no answer)"
    conc = perf.concurrency
    rates = (f"throughput {fmt_rate(perf.request_rate, 'req/s')} · input "
             f"{fmt_rate(perf.input_tps, 'tok/s')} · output {fmt_rate(perf.output_tps, 'tok/s')}"
             + ("" if conc is None else f" · in flight: at most {conc.max:,}, "
                f"{conc.mean:.2f} on average"))
    return ["", head, table, rates, goodput_line(perf)]
