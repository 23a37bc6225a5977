"""The report's text parts: header, gate table, headline numbers and the evidence table.

Input: `Results` objects (one per results file) and their labels. Output: plain dicts and lists
of already formatted strings for the template (which escapes every one of them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from workloadlang.console.format import after_abort_misses, counters_line, fmt_gap, fmt_kind
from workloadlang.report.source import workload_lines
from workloadlang.results import GateResult, Performance, Record, Results, ScopeResult
from workloadlang.resultsmodels import EngineSummary

# ---------------------------------------------------------------- formatting


def fmt_num(v: Any) -> str:
    """Input: any value. Output: short text: `12,345`, `0.9821`, `yes`, `–` for None."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, dict):
        items = list(v.items())
        text = ", ".join(f"{k}: {fmt_num(x)}" for k, x in items[:12])
        return text + (f", … ({len(items)} in all)" if len(items) > 12 else "")
    return str(v)


def fmt_seconds(s: float | None) -> str:
    """Input: seconds or None. Output: `87 ms`, `1.24 s`, `–`."""
    if s is None:
        return "–"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def fmt_headline(v: Any, fmt: str) -> str:
    """Input: a headline number (or a dict of them, `by` a field) and its declared format
    (`percent`, `tokens`, `seconds`, `number`). Output: text such as `98.2%`, `80,130 tokens`."""
    if isinstance(v, dict):
        items = list(v.items())
        text = ", ".join(f"{k}: {fmt_headline(x, fmt)}" for k, x in items[:12])
        return text + (f", … ({len(items)} in all)" if len(items) > 12 else "")
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return fmt_num(v)
    if fmt == "percent":
        return fmt_pct(v)
    if fmt == "tokens":
        return f"{round(v):,} tokens"
    if fmt == "seconds":
        return fmt_seconds(v)
    return fmt_num(v)


# ---------------------------------------------------------------- header


def engine_text(eng: EngineSummary) -> str:
    """Input: the results' `engine`. Output: its family, whether it is the simulator, and,
    when it says, how many requests it runs at once and whether its prefill times are each
    request's own work (what the verdicts allowed for: docs/verdicts.md)."""
    text = (eng.engine or "unknown") + (" (simulator)" if eng.sim else "")
    slots = eng.slots
    if slots:
        own = eng.prefill_own
        text += (f" · {slots} slot{'s' if slots != 1 else ''}, prefill times "
                 + ("each request's own" if own else "may hold other requests' work"))
    return text


def header(results: Results, label: str) -> dict[str, Any]:
    """Input: one `Results` and its label. Output: the header fields as text."""
    rs = results.records
    eng = results.engine
    threshold = results.calibration.threshold_s
    formats = results.report_format
    return {
        "label": label,
        "workload": results.workload,
        "source": results.source,
        "plan_hash": results.plan_hash,
        "salt": results.salt,
        "params": [(k, fmt_num(v)) for k, v in sorted(results.params.items())],
        "engine": engine_text(eng),
        "model": eng.model or "unknown",
        "base_url": eng.base_url,
        "when": results.started_at,
        "elapsed": fmt_seconds(results.elapsed_s),
        "exit_code": results.exit_code,
        "incomplete": results.incomplete or "",
        "requests": (f"{sum(1 for r in rs if not r.skipped):,} sent, "
                     f"{sum(1 for r in rs if r.skipped):,} skipped, "
                     f"{sum(1 for r in rs if r.error is not None):,} errored"),
        "threshold": fmt_seconds(threshold) if threshold else "",
        "counters": counters_line(results.metrics, eng.engine) or "",
        "headline": [(k, fmt_headline(v, formats.get(k, "number")))
                     for k, v in results.report.items()],
        "performance": performance_lines(results.performance),
    }


def performance_lines(perf: Performance | None) -> list[str]:
    """Input: a run's `Performance` (or None). Output: its latency percentiles, rates and
    goodput next to the cache hit rate, a line each (as `wl run` prints them)."""
    from workloadlang.console.perf import fmt_latency, fmt_rate, goodput_line

    if perf is None or not perf.requests:
        return []
    out = [f"{name}: p50 {fmt_latency(s.p50)} · p90 {fmt_latency(s.p90)} · p99 "
           f"{fmt_latency(s.p99)} ({s.n:,})" for name, s in (
               ("TTFT", perf.ttft), ("ITL", perf.itl), ("TPOT", perf.tpot), ("E2E", perf.e2e))
           if s is not None]
    out.append(f"{fmt_rate(perf.request_rate, 'req/s')} · input "
               f"{fmt_rate(perf.input_tps, 'tok/s')} · output {fmt_rate(perf.output_tps, 'tok/s')}")
    return out + [goodput_line(perf)]


# ---------------------------------------------------------------- gates


def gate_state(g: GateResult) -> str:
    """Input: a `GateResult`. Output: `pass`, `fail`, `warn` (a warn-severity gate that did not
    pass), `unverified` (a fail-severity gate that could not be judged: not a pass) or
    `undecidable` (one that could not be judged at these sizes on this engine)."""
    if g.status == "pass":
        return "pass"
    if g.severity == "warn":
        return "warn"
    return {"fail": "fail", "undecidable": "undecidable"}.get(g.status, "unverified")


def gate_cell(g: GateResult) -> dict[str, Any]:
    """Input: one `GateResult`. Output: its state, value vs threshold (for one scope) or a
    count of failing scopes, and every scope that did not pass."""
    bad = [r for r in g.results if r.status != "pass"]
    na = [r for r in g.results if r.not_applicable]
    shown = bad + na
    one = len(g.results) == 1  # its value and threshold are shown instead of its scopes
    cell: dict[str, Any] = {"state": gate_state(g), "verdict": g.verdict or "",
                            "scopes": [] if one else [scope_text(r, g.kind) for r in shown[:20]],
                            "more": max(0, len(shown) - 20)}
    if one:
        r = g.results[0]
        kind = g.kind
        cell.update(value=gate_value(r.value, kind) if r.status not in ("unknown", "undecidable")
                    and not na else "",
                    threshold="" if r.threshold is None else gate_value(r.threshold, kind),
                    detail=r.detail, summary="")
    else:
        summary = (f"{len(bad)} of {len(g.results)} scopes did not pass" if bad
                   else f"all {len(g.results)} scopes pass")
        cell.update(value="", threshold="", detail="", summary=summary + (
            f" (in {len(na)} the gate does not apply)" if na else ""))
    return cell


def scope_text(r: ScopeResult, kind: str | None = None) -> str:
    """`main#2: unknown (no data)`, `main#2: 41% vs 66% fail`, or `main#2: does not apply
    (...)` where the gate's `when` condition was false; values shown by the gate's `kind`."""
    if r.not_applicable:
        return f"{r.scope}: {r.detail}"
    return _scope_text(r, kind)


def _scope_text(r: ScopeResult, kind: str | None = None) -> str:
    """`main#2: unknown (no data)` or `main#2: 41% vs 66% fail`."""
    if r.status in ("unknown", "undecidable"):
        return f"{r.scope}: {r.status} ({r.detail})" if r.detail else f"{r.scope}: {r.status}"
    extra = f" — {r.detail}" if r.detail else ""
    versus = "" if r.threshold is None else f" vs {gate_value(r.threshold, kind)}"  # yes/no: none
    return f"{r.scope}: {gate_value(r.value, kind)}{versus} {r.status}{extra}"


def gate_value(v: Any, kind: str | None) -> str:
    """A gate's value or threshold by the gate's kind (`50ms`, `90%`, `12,070`); yes/no, and a
    results file that does not say the kind, as `fmt_num`."""
    return fmt_num(v) if kind is None or isinstance(v, bool) else fmt_kind(v, kind)


def gate_rows(runs: Sequence[Results]) -> list[dict[str, Any]]:
    """Input: the `Results` of each run. Output: one row per gate (name, scope, severity, its
    `.wl` line and code) with one cell per run (None where that run lacks the gate)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    cells: dict[tuple[str, str], list[dict[str, Any] | None]] = {}
    for i, res in enumerate(runs):
        lines = workload_lines(res.source, res.workload)
        for g in res.gates:
            key = (g.name, g.scope)
            rows.setdefault(key, {
                "name": g.name, "scope": g.scope, "severity": g.severity, "line": g.line,
                "where": f"{res.source}:{g.line}", "code": lines.get(g.line, "").strip(),
                "cells": cells.setdefault(key, [None] * len(runs))})
            cells[key][i] = gate_cell(g)
    return list(rows.values())


# ---------------------------------------------------------------- evidence


def row_class(r: Record) -> str:
    """The evidence row's highlight: the timing contradicts the engine, a miss, an error."""
    if r.skipped:
        return "skip"
    if (r.error is not None and not r.aborted) or r.impossible:
        return "err"
    if r.ttft_agrees is False:
        return "disagree"
    return "miss" if r.hit is False else ""


def row_note(r: Record, after_abort_s: float | None = None) -> str:
    """Why a row stands out, then what the model said (the template escapes it).
    `after_abort_s`: for a miss sent right after the aborted request it extends, on an engine
    that may run several at once (`console.format.after_abort_misses`), how soon."""
    parts = []
    if r.skipped:
        parts.append(f"skipped: {r.skipped}")
    if r.error is not None:
        parts.append(f"{r.error.kind}: {r.error.message}"[:160])
    if r.aborted:
        parts.append(f"aborted after {r.streamed_tokens} streamed tokens")
    if r.ttft_agrees is False:
        parts.append("engine claims a hit, TTFT looks cold" if r.hit
                     else "engine reports a miss, TTFT looks warm")
    if r.ttft_late_s:
        parts.append(f"TTFT may be up to {fmt_seconds(r.ttft_late_s)} late (read with later bytes)")
    if r.ttft_contended_s and r.prefill_source == "client_ttft":
        parts.append(f"other requests in flight for {fmt_seconds(r.ttft_contended_s)} of its TTFT")
    if r.prefill_contended_s:
        parts.append(f"other requests in flight for {fmt_seconds(r.prefill_contended_s)} of the "
                     "engine's own prefill time")
    if after_abort_s is not None:
        parts.append(f"sent {fmt_gap(after_abort_s)} after the aborted request it extends was "
                     "closed: the engine may not have processed the disconnect yet")
    if r.impossible:
        parts.append(f"impossible counts, so the cache evidence is unknown: {r.impossible}")
    parts += list(r.suspicious or [])
    if r.reply_excerpt:
        parts.append("reply: " + r.reply_excerpt[:80])
    return "; ".join(parts)


def evidence_row(r: Record, after_abort_s: float | None = None) -> tuple[str, ...]:
    """Input: a `Record`. Output: the evidence table's cells as text, class first:
    (class, id, label, planned prompt, prompt, cached, cached source, expected, expected source,
    reuse, hit, hit basis, TTFT, TTFT agrees, note)."""
    return (row_class(r), r.id, r.label, fmt_num(r.planned_prompt_tokens),
            fmt_num(r.prompt_tokens), fmt_num(r.cached_tokens), r.cached_source,
            fmt_num(r.expected_cached), r.expected_source or "", fmt_pct(r.reuse),
            fmt_num(r.hit), r.hit_basis or "", fmt_seconds(r.ttft_s),
            fmt_num(r.ttft_agrees), row_note(r, after_abort_s))


def evidence(results: Results, label: str, open_limit: int = 400) -> dict[str, Any]:
    """Input: one `Results`. Output: the evidence table for it: every request's row, the rows
    where the timing contradicts the engine's cached count, and counts. The cached source
    most requests share is stated once (`common_source`) and left out of their rows."""
    recs = sorted(results.records, key=lambda r: r.seq)
    common = Counter(r.cached_source for r in recs if r.cached_tokens is not None).most_common(1)
    common_source = common[0][0] if common else ""
    raced = dict(after_abort_misses(recs, results.engine.slots))
    rows = [evidence_row(r, raced.get(r.id)) for r in recs]
    rows = [row[:6] + ("" if row[6] == common_source else row[6],) + row[7:] for row in rows]
    disagree = [row for row in rows if row[0] == "disagree"]
    return {"label": label, "rows": rows, "disagree": disagree, "common_source": common_source,
            "open": len(rows) <= open_limit,
            "counts": {"requests": len(rows), "disagree": len(disagree),
                       "miss": sum(1 for row in rows if row[0] == "miss"),
                       "errors": sum(1 for row in rows if row[0] == "err"),
                       "impossible": sum(1 for r in recs if r.impossible)}}
