"""ninfer request-log parsing, the record <-> log join (seed, timestamp, completion order) and
the reuse classification."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workloadlang.enginelog.ninfer import (
    LogEntry,
    classify_reuse,
    match,
    parse_ninfer_lines,
    read_ninfer_log,
)


def done_row(rid: int, prompt: int, hit: int, ts: int | None, path: str = "private_endpoint", seed: int | None = None) -> str:
    row: dict[str, Any] = {
        "artifact_type": "ninfer_serve_request_log", "schema_version": 22, "event": "request_done",
        "server_instance_id": "srv-1",
        "request": {"request_id": rid, "protocol": "openai_chat_completions", "sampling": {"seed": seed}},
        "result": {"prompt_tokens": prompt, "prefix_cache_hit_tokens": hit,
                   "computed_prefill_tokens": max(0, prompt - hit), "prefix_reuse_path": path,
                   "finish_reason": "output_limit"},
    }
    if ts is not None:
        row["timestamp_unix_ms"] = ts
    return json.dumps(row)


def test_parse_keeps_request_done_and_counts_bad_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"event": "server_start", "timestamp_unix_ms": 1}),
        done_row(1, 1000, 0, 1_000, path="root", seed=11),
        "",
        "   ",
        '{"event": "request_done", truncated',
        json.dumps({"event": "request_start", "request": {"request_id": 2}}),
        "[1, 2]",
        done_row(2, 1500, 990, 2_000),
        json.dumps({"event": "throughput"}),
    ]
    log = parse_ninfer_lines(lines)
    assert [e.request_id for e in log.entries] == [1, 2]
    assert (log.blank, log.unparsable) == (2, 2)
    first = log.entries[0]
    assert (first.prompt, first.computed, first.hit_tokens, first.reuse_path, first.ts, first.seed) == (1000, 1000, 0, "root", 1_000, 11)
    assert first.finish_reason == "output_limit" and first.server_instance_id == "srv-1"
    assert log.entries[1].reuse == pytest.approx(0.66)
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert read_ninfer_log(path) == log


@pytest.mark.parametrize(("reuse", "path", "cls"), [
    (0.99, "root", "miss"), (None, "root", "miss"), (0.99, "full_reset", "miss"), (None, "private_endpoint", "unknown"),
    (0.05, "private_endpoint", "miss"), (0.10, "x", "partial"), (0.69, None, "partial"), (0.70, None, "hit"), (1.0, "shared_stable_prefix", "hit"),
])
def test_classify_reuse(reuse: float | None, path: str | None, cls: str) -> None:
    assert classify_reuse(reuse, path) == cls


def rec(rid: str, t_send: float | None, prompt: int | None, e2e: float | None = None, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(id=rid, t_send_unix=t_send, prompt_tokens=prompt, e2e_s=e2e, **kw)


def entry(rid: int, prompt: int | None, ts: int | None, seed: int | None = None) -> LogEntry:
    return LogEntry(request_id=rid, prompt=prompt, hit_tokens=0, ts=ts, seed=seed)


def test_match_by_nearest_timestamp_with_sizes_agreeing() -> None:
    # Completion times: a at 1000.5 s, b at 1001.0 s; the log finished them in the other order.
    records = [rec("a", 1000.0, 500, e2e=0.5), rec("b", 1000.2, 700, e2e=0.8)]
    entries = [entry(1, 700, 1_001_010), entry(2, 500, 1_000_490), entry(3, 999, 1_000_500)]
    result = match(records, entries)
    assert result.matched["a"].request_id == 2  # nearest with the same size, not entry 3
    assert result.matched["b"].request_id == 1
    assert result.unmatched == [] and [e.request_id for e in result.extra] == [3]


def test_timestamped_record_without_entry_in_window_stays_unmatched() -> None:
    records = [rec("a", 1000.0, 500), rec("b", 2000.0, 500)]
    entries = [entry(1, 500, 1_000_100)]
    result = match(records, entries, tolerance_ms=15000)
    assert list(result.matched) == ["a"] and result.unmatched == ["b"] and result.extra == []


def test_unknown_sizes_match_and_dicts_work() -> None:
    records = [{"id": "a", "t_send_unix": 10.0, "prompt_tokens": None}, {"id": "b", "t_end_unix": 20.0, "prompt_tokens": 5}]
    entries = [entry(1, 77, 10_050), entry(2, None, 19_990)]
    result = match(records, entries)
    assert result.matched["a"].request_id == 1 and result.matched["b"].request_id == 2


def test_fallback_completion_order_uses_trailing_entries() -> None:
    records = [rec("a", None, 100), rec("b", None, 200)]
    entries = [entry(1, 50, None), entry(2, 100, None), entry(3, 200, None)]
    result = match(records, entries)
    assert result.matched["a"].request_id == 2 and result.matched["b"].request_id == 3
    assert [e.request_id for e in result.extra] == [1]


def test_log_without_timestamps_matches_timed_records_by_order_and_keeps_mismatches() -> None:
    records = [rec("a", 5.0, 100), rec("b", 6.0, 999)]
    entries = [entry(1, 100, None), entry(2, 200, None)]
    result = match(records, entries)
    assert result.matched["a"].request_id == 1
    assert result.unmatched == ["b"]  # size mismatch: kept as unmatched, never dropped
    assert [e.request_id for e in result.extra] == [2]


def test_seed_join_wins_over_time() -> None:
    records = [rec("a", 100.0, 500, seed=42), rec("b", 100.0, 500, seed=43)]
    entries = [entry(1, 500, 100_000, seed=43), entry(2, 500, 100_001, seed=42)]
    result = match(records, entries)
    assert result.matched["a"].request_id == 2 and result.matched["b"].request_id == 1


def test_more_records_than_entries_all_accounted_for() -> None:
    records = [rec(str(i), None, None) for i in range(5)]
    result = match(records, [entry(1, None, None), entry(2, None, None)])
    assert len(result.matched) + len(result.unmatched) == 5
    assert result.unmatched == ["2", "3", "4"]
