"""Text a person reads: numbers, times and the engine's counters formatted one way, shared by
the run's terminal views and the HTML report.

Input: values of records and results. Output: short strings.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from workloadlang.resultsmodels import MetricsSummary


def fmt_s(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s" if v < 100 else f"{v:.1f}s"


def fmt_tok(v: int | None) -> str:
    return "–" if v is None else f"{v:,}"


def fmt_pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def fmt_tps(v: float | None) -> str:
    return "–" if v is None else f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def fmt_duration(v: float) -> str:
    """Seconds to three significant digits: `1.26ms`, `50ms`, `2.35s`, `1,234.5s` (close
    values stay apart: a 9.9 ms lag next to a 10 ms limit)."""
    a = abs(v)
    if a < 1:
        return f"{v * 1000:.3g}ms"
    return f"{v:.3g}s" if a < 100 else f"{v:,.1f}s"


def fmt_ratio(v: float) -> str:
    """A ratio as a percentage with up to two decimals: `90%`, `89.96%`, `66.67%`."""
    text = f"{100 * v:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def fmt_number(v: float) -> str:
    """A plain number: whole ones with thousands separators (`12,070`), others to four
    significant digits (`1.75`, `0.3333`), never in exponent form."""
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    text = f"{v:.4g}"
    return format(Decimal(text), "f") if "e" in text else text


def fmt_kind(v: Any, kind: str | None) -> str:
    """A value by its kind (`duration` or `seconds`, `ratio`, `number`, `count`, `bool`; None:
    as `fmt_val` shows it): what a gate's value and threshold, `wl compare` and a sweep's table
    show."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "true" if v else "false"
    if not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if kind in ("duration", "seconds"):
        return fmt_duration(v)
    if kind == "ratio":
        return fmt_ratio(v)
    if kind in ("number", "count"):
        return fmt_number(v)
    return fmt_val(v)


def fmt_val(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def fmt_report(v: Any, fmt: str) -> str:
    if v is None or isinstance(v, bool):
        return fmt_val(v)
    if fmt == "percent":
        return fmt_pct(v)
    if fmt == "tokens":
        return fmt_tok(round(v))
    if fmt == "seconds":
        return fmt_s(v)
    if isinstance(v, int) or float(v).is_integer() or abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def counters_line(metrics: MetricsSummary, engine: str | None = None) -> str | None:
    """Input: the results' `metrics` (runner.metrics_summary). Output: the engine's own
    prefix-cache counters over the run next to what the records hold, with a note when the
    engine looked up more prompt tokens than the records hold or fewer; without counters at
    both ends, why not when a read failed, else None."""
    queries, hits = metrics.engine_queries_tokens, metrics.engine_hits_tokens
    if queries is None or hits is None:
        return unread_counters(metrics, engine)
    prompt, cached = metrics.records_prompt_tokens, metrics.records_cached_tokens
    family = metrics.snapshots[-1].family if metrics.snapshots else "?"
    line = (f"engine counters over the run [{family}]: {hits:,} of {queries:,} prompt tokens "
            f"from cache; the records: {cached:,} of {prompt:,}")
    extra = queries - prompt
    if abs(extra) <= 0.01 * max(queries, prompt, 1):
        return line
    n = metrics.records_uncounted
    planned = metrics.records_uncounted_planned_tokens
    if n and extra > 0 and abs(extra - planned) <= 0.05 * planned:
        return line + (f"; the engine's {extra:,} more are about what the {n} request(s) "
                       f"without a count in the records (aborted, errored) were planned to send "
                       f"({planned:,})")
    more = (f"{extra:,} more prompt tokens than the records hold (requests without a count — "
            f"aborted, errored: {n}, planned {planned:,} — or another client of the engine)"
            if extra > 0 else f"{-extra:,} fewer prompt tokens than the records hold (counters "
            f"reset, or not every request counted)")
    return line + f" · NOTE: the engine looked up {more}"


def unread_counters(metrics: MetricsSummary, engine: str | None) -> str | None:
    """Output: the line for a run whose engine counters could not be read at both ends, saying
    why (`metrics.unavailable`), or None when no read failed (no metrics URL, or none read)."""
    why = metrics.unavailable
    if why is None:
        return None
    # llama-server answers 501 when started without --metrics
    hint = ("; llama-server serves them with --metrics"
            if engine == "llamacpp" and why.endswith("HTTP 501") else "")
    return (f"engine counters: not read ({why}), so the records "
            f"({metrics.records_cached_tokens:,} of "
            f"{metrics.records_prompt_tokens:,} prompt tokens from cache) are not "
            f"cross-checked{hint}")


# a request sent sooner than this after the close of the aborted request it extends may reach
# the engine before the disconnect does (llama-server noticed within one token here, 10-60 ms)
RACE_WINDOW_S = 0.1


def after_abort_misses(records: list[Any], slots: int | None) -> list[tuple[str, float]]:
    """Input: the records, the engine's slot count (None: unknown). Output: `(id, seconds)`
    for each miss whose prompt extends an aborted request and was sent within `RACE_WINDOW_S`
    of that request's close, with the time between — on an engine that may run several
    requests at once (not one slot), where a request that comes before the engine has
    processed the disconnect can land in another slot (the original tool's abort-sim false
    alarm: it sent the re-prompt at once)."""
    if slots == 1:
        return []
    by_id = {r.id: r for r in records}
    out = []
    for r in records:
        src = by_id.get(r.prefix_source) if r.prefix_source else None
        if r.hit is False and src is not None and src.aborted and src.e2e_s is not None \
                and r.t_start_s is not None and src.t_start_s is not None:
            gap = max(0.0, r.t_start_s - src.t_start_s - src.e2e_s)
            if gap < RACE_WINDOW_S:
                out.append((r.id, gap))
    return out


def fmt_gap(seconds: float) -> str:
    """Output: a short time as `0.3 ms`, `12 ms` or `3.5 s`."""
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms" if ms < 1000 else f"{seconds:.1f} s"
