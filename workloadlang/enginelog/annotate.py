"""Annotating a run's records with the engine's own request log (ninfer `--request-log-jsonl`).

Input: the run's `Record`s and the log's `request_done` entries (`ninfer`), joined by
`ninfer.match` (seed, then nearest completion time within the tolerance where the prompt sizes
agree, then completion order for what has no time).
Output: `annotate(records, entries)` -> `AnnotateSummary` (pure: new record objects, inputs
untouched); `annotate_results(results, log_path)` puts the annotated records and the summary into
`results` (`metrics.engine_log`) and returns the summary. No file is ever written: the
CLI writes the results to `--output`, never over the log or an earlier results file.

Each matched record gets `engine_log = {request_id, computed, hit_tokens, reuse_path, reuse_class,
ground_truth_reuse}`. For a warm request (the plan expects at least half its prompt from cache)
`ground_truth_reuse` is the log's hit tokens over the expected cached tokens — the same ratio as
`Record.reuse`, so the two compare directly — and `reuse_class` is hit / partial / miss / unknown
(`ninfer.classify_reuse`; a `root` or `full_reset` path is a miss). A cold request is classed
`cold` (its ratio is hit / prompt), so requests meant to start from scratch never inflate the miss
count. Unmatched records are kept, unchanged, and counted. When the log contradicts the API's
cached tokens, the record's `suspicious` list says how.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from workloadlang.enginelog.ninfer import (
    NO_REUSE_PATHS,
    LogEntry,
    classify_reuse,
    match,
    read_ninfer_log,
)
from workloadlang.results import Record, Results
from workloadlang.resultsmodels import EngineLogMatch, EngineLogSummary

TOLERANCE_MS = 15000.0
CONTRADICTION = 0.10  # of the prompt: a disagreement smaller than this is block rounding
MAX_IDS = 50


class AnnotateSummary(EngineLogSummary):
    """What the join found (`results.EngineLogSummary`: `matched`/`unmatched`: sent records with
    / without a log entry (unmatched ones are kept); `not_sent`: skipped records (never looked
    up); `extra`: log entries no record claimed (other traffic, or requests of another run);
    `classes`: ground-truth classes of the matched records; `suspicious`: records whose API
    numbers the log contradicts), and `records`: the annotated records, in input order (not
    part of the dump)."""

    tolerance_ms: float = TOLERANCE_MS
    records: list[Record] = Field(default_factory=list, exclude=True)


def expected_for(r: Record, e: LogEntry) -> int:
    """Input: a record and its entry. Output: the cached tokens a perfect cache would serve, in
    the engine's counts: the record's runtime figure, else the plan's scaled to the log's prompt."""
    if r.expected_cached:
        return r.expected_cached
    prompt = e.prompt or r.prompt_tokens
    if prompt and r.planned_prompt_tokens:
        return round(r.planned_expected_cached * prompt / r.planned_prompt_tokens)
    return r.planned_expected_cached


def ground_truth(r: Record, e: LogEntry) -> tuple[float | None, str]:
    """Input: a record and its entry. Output: (ground-truth reuse, class). Warm: hit tokens over
    the expected cached tokens (capped at 1), classed by `classify_reuse`. Cold: hit / prompt,
    class `cold`."""
    if not r.warm:
        return e.reuse, "cold"
    expected = expected_for(r, e)
    reuse = None if e.hit_tokens is None or expected <= 0 else min(1.0, e.hit_tokens / expected)
    return reuse, classify_reuse(reuse, e.reuse_path)


def contradictions(r: Record, e: LogEntry) -> list[str]:
    """Input: a record and its entry. Output: the ways the log contradicts the API's cached
    tokens by more than 10 % of the prompt (empty when it agrees or cannot tell): a from-scratch
    path with cached tokens reported, a different hit count, or more recomputed than uncached."""
    prompt = e.prompt or r.prompt_tokens
    cached = r.cached_tokens
    if r.error is not None or cached is None or not prompt:
        return []
    slack = CONTRADICTION * prompt
    if e.reuse_path in NO_REUSE_PATHS and cached > slack:
        return [f"engine log: reuse path `{e.reuse_path}` (recomputed from scratch) but the API "
                f"reported {cached:,} cached tokens ({100 * cached / prompt:.0f}% of the prompt)"]
    if e.hit_tokens is not None and abs(e.hit_tokens - cached) > slack:
        return [f"engine log: {e.hit_tokens:,} prefix-cache hit tokens but the API reported "
                f"{cached:,} cached"]
    if e.computed is not None and e.computed > (prompt - cached) + slack:
        return [f"engine log: {e.computed:,} tokens recomputed but the API reported only "
                f"{prompt - cached:,} uncached"]
    return []


def annotated(r: Record, e: LogEntry) -> tuple[Record, str, bool]:
    """Input: a record and its entry. Output: (a new record with `engine_log` set and any
    contradiction appended to `suspicious`, its class, whether it is suspicious)."""
    reuse, cls = ground_truth(r, e)
    info = EngineLogMatch(request_id=e.request_id, computed=e.computed, hit_tokens=e.hit_tokens,
                          reuse_path=e.reuse_path, reuse_class=cls, ground_truth_reuse=reuse)
    notes = contradictions(r, e)
    new = r.model_copy(update={"engine_log": info, "suspicious": [*r.suspicious, *notes]})
    return new, cls, bool(notes)


def annotate(records: Sequence[Record], entries: Sequence[LogEntry],
             tolerance_ms: float = TOLERANCE_MS) -> AnnotateSummary:
    """Input: the run's records (any order) and the log entries (file order). Output: the
    summary with the annotated records in input order; every record is kept, matched or not.
    Skipped records were never sent, so they are not offered to the join."""
    sent = [r for r in records if not r.skipped]
    joined = match(sent, entries, tolerance_ms)
    summary = AnnotateSummary(entries=len(entries), tolerance_ms=tolerance_ms,
                              not_sent=len(records) - len(sent), extra=len(joined.extra),
                              unmatched=len(joined.unmatched),
                              unmatched_ids=joined.unmatched[:MAX_IDS])
    out = []
    for r in records:
        entry = None if r.skipped else joined.matched.get(r.id)
        if entry is None:
            out.append(r)
            continue
        new, cls, odd = annotated(r, entry)
        out.append(new)
        summary.matched += 1
        summary.classes[cls] = summary.classes.get(cls, 0) + 1
        if odd:
            summary.suspicious += 1
            if len(summary.suspicious_ids) < MAX_IDS:
                summary.suspicious_ids.append(r.id)
    summary.records = out
    return summary


def annotate_results(results: Results, log_path: str,
                     tolerance_ms: float = TOLERANCE_MS) -> EngineLogSummary:
    """Input: a `Results` and a ninfer request-log path. Output: the summary, also stored as
    `results.metrics.engine_log`; `results.records` is replaced by the annotated records (same
    length and order). An unreadable log never raises (the run's results must still be
    written): the summary then carries `error`."""
    try:
        log = read_ninfer_log(log_path)
    except OSError as e:
        summary = AnnotateSummary(log=log_path, error=f"cannot read {log_path}: {e.strerror or e}",
                                  tolerance_ms=tolerance_ms)
    else:
        summary = annotate(results.records, log.entries, tolerance_ms)
        summary.log, summary.blank_lines, summary.unparsable_lines = log_path, log.blank, log.unparsable
        results.records = summary.records
    out = EngineLogSummary.model_validate(summary.model_dump())
    results.metrics = results.metrics.model_copy(update={"engine_log": out})
    return out


def summary_line(summary: EngineLogSummary) -> str:
    """Input: the summary. Output: one line for a person, e.g. `engine log: 5/6 requests
    matched (1 unmatched, kept; 1 extra entry); ground truth: 3 hit / 0 partial / 1 miss /
    0 unknown, 1 cold; 1 suspicious`."""
    if summary.error:
        return f"engine log: {summary.error}"
    sent = summary.matched + summary.unmatched
    c = summary.classes
    extra = summary.extra
    line = (f"engine log: {summary.matched}/{sent} requests matched ({summary.unmatched} "
            f"unmatched, kept; {extra} extra entr{'y' if extra == 1 else 'ies'}); ground truth: "
            f"{c.get('hit', 0)} hit / {c.get('partial', 0)} partial / {c.get('miss', 0)} miss / "
            f"{c.get('unknown', 0)} unknown, {c.get('cold', 0)} cold")
    if summary.suspicious:
        line += f"; {summary.suspicious} suspicious: {', '.join(summary.suspicious_ids[:5])}"
    return line
