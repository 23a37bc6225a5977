"""Joining a synthetic ninfer request log onto a run's records: interleaved concurrent entries,
an unmatched record (kept), an extra entry, a `root` path contradicting a high API reuse."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from workloadlang.enginelog.annotate import annotate, annotate_results, contradictions, summary_line
from workloadlang.enginelog.ninfer import LogEntry, parse_ninfer_lines
from workloadlang.results import ErrorDetail, Record, Results
from workloadlang.resultsmodels import EngineLogMatch

T0 = 1_700_000_000.0  # unix seconds


def record(rid: str, *, send: float | None, e2e: float = 1.0, prompt: int, expected: int,
           cached: int | None, skipped: bool = False, error: bool = False) -> Record:
    base = dict(id=rid, seq=0, session=rid.split("/")[0], phase="", label=rid.split("/")[1],
                index=0, kind="reply", line=1, planned_prompt_tokens=prompt,
                planned_expected_cached=expected, new_tokens=prompt - expected, max_tokens=16)
    if skipped:
        return Record(**base, skipped="until: seen")
    return Record(**base, t_send_unix=None if send is None else T0 + send, e2e_s=e2e,
                  prompt_tokens=prompt, cached_tokens=cached, expected_cached=expected,
                  reuse=None if not expected or cached is None else min(1, cached / expected),
                  error=ErrorDetail(kind="http", message="500") if error else None)


def done_row(rid: int, prompt: int, hit: int, ts_s: float, path: str = "private_turn_closure",
             computed: int | None = None) -> str:
    return json.dumps({
        "event": "request_done", "timestamp_unix_ms": int((T0 + ts_s) * 1000),
        "request": {"request_id": rid, "sampling": {}},
        "result": {"prompt_tokens": prompt, "prefix_cache_hit_tokens": hit,
                   "computed_prefill_tokens": prompt - hit if computed is None else computed,
                   "prefix_reuse_path": path}})


def scenario() -> tuple[list[Record], list[str]]:
    """Two sessions running concurrently; the log is in completion order, which interleaves."""
    records = [
        record("a/main/0", send=0.0, e2e=2.0, prompt=1000, expected=0, cached=0),       # done 2.0
        record("b/main/0", send=0.1, e2e=1.5, prompt=1100, expected=0, cached=0),       # done 1.6
        record("a/main/1", send=2.1, e2e=1.0, prompt=2000, expected=1000, cached=992),  # done 3.1
        record("b/main/1", send=1.7, e2e=1.0, prompt=2100, expected=1100, cached=1088), # done 2.7
        record("a/final/0", send=3.2, e2e=0.5, prompt=3000, expected=2000, cached=1984),# done 3.7: root in log
        record("b/final/0", send=90.0, e2e=0.5, prompt=3100, expected=2100, cached=2080),  # no entry near
        record("b/skip/0", send=None, prompt=500, expected=0, cached=None, skipped=True),
    ]
    lines = [
        json.dumps({"event": "server_start", "timestamp_unix_ms": int(T0 * 1000)}),
        done_row(7, 1100, 0, 1.6, path="root"),
        done_row(6, 1000, 0, 2.0, path="root"),
        done_row(9, 2100, 1088, 2.7),
        done_row(8, 2000, 992, 3.1),
        done_row(10, 3000, 0, 3.7, path="root"),      # the API said 1,984 cached
        done_row(99, 4096, 4000, 4.0),                # another client's request: extra
        "not json",
    ]
    return records, lines


def test_interleaved_entries_join_by_time_and_size() -> None:
    records, lines = scenario()
    log = parse_ninfer_lines(lines)
    summary = annotate(records, log.entries)
    by = {r.id: r for r in summary.records}
    assert [r.id for r in summary.records] == [r.id for r in records]  # all kept, in order
    assert {rid: r.engine_log.request_id for rid, r in by.items() if r.engine_log} == {
        "a/main/0": 6, "b/main/0": 7, "a/main/1": 8, "b/main/1": 9, "a/final/0": 10}
    assert (summary.matched, summary.unmatched, summary.extra, summary.not_sent) == (5, 1, 1, 1)
    assert summary.unmatched_ids == ["b/final/0"]
    assert by["b/final/0"].engine_log is None and by["b/final/0"] == records[5]


def test_engine_log_fields_and_ground_truth_classes() -> None:
    records, lines = scenario()
    summary = annotate(records, parse_ninfer_lines(lines).entries)
    by = {r.id: r for r in summary.records}
    assert by["a/main/1"].engine_log == EngineLogMatch(
        request_id=8, computed=1008, hit_tokens=992, reuse_path="private_turn_closure",
        reuse_class="hit", ground_truth_reuse=992 / 1000)
    assert by["a/main/0"].engine_log.reuse_class == "cold"  # meant to start from scratch
    assert by["a/final/0"].engine_log.reuse_class == "miss"
    assert by["a/final/0"].engine_log.ground_truth_reuse == 0.0
    assert summary.classes == {"hit": 2, "partial": 0, "miss": 1, "unknown": 0, "cold": 2}


def test_root_path_contradicting_a_high_api_reuse_is_flagged() -> None:
    records, lines = scenario()
    summary = annotate(records, parse_ninfer_lines(lines).entries)
    by = {r.id: r for r in summary.records}
    assert by["a/final/0"].reuse == 0.992  # the API's story
    notes = by["a/final/0"].suspicious
    assert len(notes) == 1 and "root" in notes[0] and "1,984 cached" in notes[0]
    assert summary.suspicious == 1 and summary.suspicious_ids == ["a/final/0"]
    assert all(not by[i].suspicious for i in by if i != "a/final/0")
    assert records[4].suspicious == [] and records[4].engine_log is None  # input untouched


def test_contradiction_rules() -> None:
    r = record("a/main/1", send=0, prompt=2000, expected=1000, cached=992)
    agree = LogEntry(prompt=2000, hit_tokens=992, computed=1008, reuse_path="private_endpoint")
    assert contradictions(r, agree) == []
    assert contradictions(r, agree.model_copy(update={"hit_tokens": 960})) == []  # block rounding
    fewer = agree.model_copy(update={"hit_tokens": 200, "computed": 1800})
    assert "200 prefix-cache hit tokens" in contradictions(r, fewer)[0]
    recomputed = agree.model_copy(update={"hit_tokens": None, "computed": 1900})
    assert "1,900 tokens recomputed" in contradictions(r, recomputed)[0]
    small = record("a/main/1", send=0, prompt=2000, expected=1000, cached=150)
    assert contradictions(small, LogEntry(prompt=2000, hit_tokens=0, reuse_path="root")) == []
    errored = record("a/main/1", send=0, prompt=2000, expected=1000, cached=None, error=True)
    assert contradictions(errored, LogEntry(prompt=2000, reuse_path="root")) == []


def results_with(records: list[Record]) -> Results:
    return Results(workload="agent_sim", source="x.wl", params={}, salt="s", plan_hash="h",
                   engine={}, started_at="t", elapsed_s=1.0, hit_ratio=0.9, calibration={},
                   metrics={"records_prompt_tokens": 1}, client={}, incomplete=None,
                   exit_code=0, gates=[], verdicts={}, report={}, records=records)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_annotate_results_stores_the_summary_and_writes_nothing(tmp_path: Path) -> None:
    records, lines = scenario()
    log = tmp_path / "requests.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = digest(log)
    results = results_with(records)
    out = annotate_results(results, str(log))
    assert digest(log) == before and sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl"]
    assert results.metrics.engine_log == out and results.metrics.records_prompt_tokens == 1
    assert (out.matched, out.unmatched, out.extra, out.entries) == (5, 1, 1, 6)
    assert out.unparsable_lines == 1 and "records" not in out.model_dump()
    assert len(results.records) == len(records)
    assert results.records[4].engine_log.reuse_class == "miss"
    json.loads(results.to_json())  # still serialisable
    line = summary_line(out)
    assert line.startswith("engine log: 5/6 requests matched (1 unmatched, kept; 1 extra entry)")
    assert "2 hit / 0 partial / 1 miss / 0 unknown, 2 cold; 1 suspicious: a/final/0" in line


def test_an_unreadable_log_never_raises(tmp_path: Path) -> None:
    records, _ = scenario()
    results = results_with(records)
    out = annotate_results(results, str(tmp_path / "missing.jsonl"))
    assert out.error is not None and out.error.startswith("cannot read") and out.matched == 0
    assert results.records == records and results.metrics.engine_log == out
    assert summary_line(out).startswith("engine log: cannot read")


def test_positions_are_used_only_without_timestamps() -> None:
    """A log without timestamps falls back to completion order against the trailing entries."""
    records = [record("a/main/0", send=0.0, prompt=1000, expected=0, cached=0),
               record("a/main/1", send=2.0, prompt=2000, expected=1000, cached=990)]
    rows: list[dict[str, Any]] = [json.loads(done_row(i, p, h, 0)) for i, p, h in
                                  ((1, 512, 0), (2, 1000, 0), (3, 2000, 990))]
    for row in rows:
        del row["timestamp_unix_ms"]
    summary = annotate(records, parse_ninfer_lines(json.dumps(r) for r in rows).entries)
    assert [r.engine_log.request_id for r in summary.records] == [2, 3]
    assert summary.extra == 1


def test_a_log_that_is_a_named_pipe_is_not_waited_on(tmp_path: Path) -> None:
    """A FIFO with no writer would block an open or a read forever: it is refused as an
    unreadable log at once, and the run's records are kept as they were."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    records, _ = scenario()
    results = results_with(records)
    out = annotate_results(results, str(fifo))
    assert out.error is not None
    assert out.error.startswith("cannot read") and "not a regular file" in out.error
    assert results.records == records
