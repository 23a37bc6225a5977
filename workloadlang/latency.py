"""Latency, throughput and goodput: per request from its stamps, per run over its records.

Input: a request's measured times (TTFT, end-to-end, the gaps between its token events) and
counts, or a run's `results.Record`s with the workload's SLOs (`results.Slo`) and windows.
Output: a request's time per output token (`tpot`), output speed (`output_tps`), ITL spread,
whether it met the SLOs (`slo_met`) and which window it was sent in (`window_of`); a run's
`results.Performance` (`performance`): percentiles, rates over the measured window, the
concurrency reached over time and the goodput. Definitions: docs/metrics.md.

A record is measured when it was sent outside the warm-up and cool-down windows; the measured
window runs from the first measured send to the last measured answer's end, and every rate is
per second of it (`rate(...)` in gates reads the same window).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from workloadlang.results import Concurrency, Goodput, Performance, Record, Slo, Spread

SERIES_BINS = 120
"""Stretches of the run the concurrency series has at most (one point each)."""


def quantile(xs: Sequence[float], q: float) -> float:
    """Input: sorted values (not empty), a fraction. Output: the q-quantile, interpolated
    linearly between the two nearest order statistics (numpy's default, as vLLM bench and
    AIPerf report theirs)."""
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    if xs[hi] == xs[lo]:  # also two unbounded ends (inf - inf is not a number)
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values: Iterable[float | None]) -> Spread | None:
    """Input: values (None ones are left out). Output: their `Spread`, None when there are
    none."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    return Spread(n=len(xs), min=xs[0], mean=math.fsum(xs) / len(xs), p50=quantile(xs, 0.5),
                  p90=quantile(xs, 0.9), p95=quantile(xs, 0.95), p99=quantile(xs, 0.99),
                  max=xs[-1])


def tpot(ttft: float | None, e2e: float | None, tokens: int | None) -> float | None:
    """Time per output token after the first: `(e2e - ttft) / (tokens - 1)`, from the first
    token's arrival to the answer's end over the tokens generated after the first. None
    without a first token or with fewer than 2 tokens."""
    if ttft is None or e2e is None or not tokens or tokens < 2:
        return None
    return max(0.0, e2e - ttft) / (tokens - 1)


def output_tps(tokens: int | None, e2e: float | None) -> float | None:
    """Output tokens per second of the whole request (send to answer's end); None without
    tokens or time."""
    if not tokens or not e2e or e2e <= 0:
        return None
    return tokens / e2e


def rounded(gaps: Sequence[float]) -> list[float]:
    """Output: the gaps to the microsecond (what a record keeps: the stamps are no finer)."""
    return [round(g, 6) for g in gaps]


def slo_met(rec: Record, slo: Slo | None) -> bool | None:
    """Output: whether an answered request met every bound of `slo` (an error never does; a
    request with fewer than two tokens has no time per output token to bound); None without
    SLOs or for a request not sent. A request planned at an instant (a turn rate, an arrival,
    a trace) counts its TTFT and end-to-end latency from that instant: the time it went late
    (`schedule_lag_s`: waiting for the answer before it, a place, a slot) kept its user
    waiting as much as a queue in the engine. A TTFT whose stamp may be late counts as stamped
    (its later end): goodput is never overstated."""
    if slo is None or rec.skipped:
        return None
    if rec.error is not None:
        return False
    lag = max(0.0, rec.schedule_lag_s or 0.0)
    bounds = ((slo.ttft_s, rec.ttft_s), (slo.e2e_s, rec.e2e_s))
    if any(b is not None and (v is None or v + lag > b) for b, v in bounds):
        return False
    return slo.tpot_s is None or rec.tpot_s is None or rec.tpot_s <= slo.tpot_s


def window_of(t_start: float | None, warmup_s: float | None, cooldown_s: float | None,
              duration_s: float | None) -> str | None:
    """Output: `warmup` for a request sent before the warm-up ended, `cooldown` for one sent
    in the last `cooldown_s` of the run's duration, else None (measured)."""
    if t_start is None:
        return None
    if warmup_s and t_start < warmup_s:
        return "warmup"
    if cooldown_s and duration_s is not None and t_start >= duration_s - cooldown_s:
        return "cooldown"
    return None


def measured(records: Iterable[Record]) -> list[Record]:
    """Output: the records sent outside the warm-up and cool-down windows."""
    return [r for r in records if not r.skipped and r.window is None]


def end_of(r: Record) -> float:
    return (r.t_start_s or 0.0) + (r.e2e_s or 0.0)


def window(records: Sequence[Record]) -> tuple[float, float] | None:
    """Input: measured records. Output: (first send, last answer's end) in seconds from the
    run's start, None when none was sent or no time passed."""
    timed = [r for r in records if r.t_start_s is not None]
    if not timed:
        return None
    lo, hi = min(r.t_start_s or 0.0 for r in timed), max(end_of(r) for r in timed)
    return (lo, hi) if hi > lo else None


def per_second(amount: float, span: tuple[float, float] | None) -> float | None:
    """Output: `amount` per second of the measured window, None without one."""
    return None if span is None else amount / (span[1] - span[0])


def concurrency(records: Sequence[Record], span: tuple[float, float] | None) -> Concurrency | None:
    """Input: every sent record of the run (the engine's load whatever the window) and the
    measured window. Output: the requests in flight over time (see `results.Concurrency`)."""
    sent = [r for r in records if not r.skipped and r.t_start_s is not None]
    if not sent:
        return None
    # an answer's end before a send at the same instant: a slot handed on is not two in flight
    events = sorted([(r.t_start_s or 0.0, 1) for r in sent] + [(end_of(r), -1) for r in sent])
    return Concurrency(max=_most(events), mean=_mean_level(events, span),
                       series=_series(events))


def _most(events: Sequence[tuple[float, int]]) -> int:
    level = most = 0
    for _, step in events:
        level += step
        most = max(most, level)
    return most


def _mean_level(events: Sequence[tuple[float, int]], span: tuple[float, float] | None) -> float:
    """Output: the time-weighted mean of the requests in flight over `span` (over the events'
    own stretch without one)."""
    lo, hi = span if span is not None else (events[0][0], events[-1][0])
    if hi <= lo:
        return float(_most(events))
    level, last, area = 0, events[0][0], 0.0
    for t, step in events:
        area += level * max(0.0, min(t, hi) - max(last, lo))
        level, last = level + step, t
    return area / (hi - lo)


def _series(events: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    """Output: the most requests in flight in each of `SERIES_BINS` equal stretches of the
    events' time (fewer when they span no time), as (stretch start, requests)."""
    start, end = events[0][0], events[-1][0]
    bins = SERIES_BINS if end > start else 1
    width = (end - start) / bins or 1.0
    out, level, i = [], 0, 0
    for k in range(bins):
        top, until = level, start + (k + 1) * width
        while i < len(events) and (events[i][0] < until or k == bins - 1):
            level += events[i][1]
            top, i = max(top, level), i + 1
        out.append((round(start + k * width, 6), top))
    return out


def goodput(records: Sequence[Record], slo: Slo | None,
            span: tuple[float, float] | None) -> Goodput | None:
    """Input: measured records, the SLOs, the measured window. Output: the goodput (see
    `results.Goodput`), None without SLOs."""
    if slo is None:
        return None
    judged = [r for r in records if r.slo_met is not None]
    met = sum(1 for r in judged if r.slo_met)
    share = met / len(judged) if judged else None
    return Goodput(slo=slo, met=met, judged=len(judged), attainment=share,
                   rate=per_second(met, span),
                   sustained=None if share is None else share >= slo.attainment)


def performance(records: Sequence[Record], slo: Slo | None = None) -> Performance:
    """Input: a run's records (in any order) and its SLOs. Output: its `Performance`."""
    mine = measured(records)
    span = window(mine)
    ok = [r for r in mine if r.error is None]
    gaps = [g for r in ok for g in (r.itl_s or ())]
    return Performance(
        window_s=None if span is None else span[1] - span[0], requests=len(mine),
        completed=len(ok),
        excluded=sum(1 for r in records if not r.skipped and r.window is not None),
        request_rate=per_second(len(ok), span), hit_rate=hit_rate(ok),
        input_tps=per_second(sum(r.prompt_tokens or 0 for r in ok), span),
        output_tps=per_second(sum(generated(r) for r in ok), span),
        ttft=spread(r.ttft_s for r in ok), itl=spread(gaps), tpot=spread(r.tpot_s for r in ok),
        e2e=spread(r.e2e_s for r in ok),
        output_tps_per_request=spread(r.output_tps for r in ok),
        schedule_lag=spread(r.schedule_lag_s for r in mine),
        concurrency=concurrency(records, span), goodput=goodput(mine, slo, span))


def hit_rate(records: Sequence[Record]) -> float | None:
    """Output: the prompt tokens served from cache over the records whose cached count the
    engine gave; None without one."""
    told = [r for r in records if r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in told)
    return sum(r.cached_tokens or 0 for r in told) / prompt if prompt else None


def generated(r: Record) -> int:
    """Output: the tokens a request generated: the engine's count, else the streamed events."""
    return r.completion_tokens if r.completion_tokens is not None else r.streamed_tokens
