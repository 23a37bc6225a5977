"""Joining the engine's own request log to the client's records (ground truth for reuse).

ninfer writes one JSON object per line (`--request-log-jsonl`); the `request_done` rows carry the
engine's cached count (`result.prefix_cache_hit_tokens`), the recomputed part and the reuse path —
which tells a real prefix hit from a recompute that `cached_tokens` over HTTP cannot.

* `parse_ninfer_lines(lines)` / `read_ninfer_log(path)` -> `NinferLog` (entries in file order,
  i.e. completion order; blank and unparsable lines counted, not fatal).
* `match(records, entries, tolerance_ms)` -> `LogMatch`: by seed when both sides carry one, then
  by nearest timestamp within the tolerance where the prompt sizes agree, then by completion
  order for what has no timestamp. Unmatched records are kept and reported, never dropped.
* `classify_reuse(reuse, path)` -> hit / partial / miss / unknown.
"""

from __future__ import annotations

import bisect
import errno
import json
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ReuseClass = Literal["hit", "partial", "miss", "unknown"]
NO_REUSE_PATHS = frozenset({"root", "full_reset"})  # the request started from scratch
MISS_BELOW = 0.10
HIT_FROM = 0.70


class LogEntry(BaseModel):
    """One `request_done` row: `request_id` (request.request_id, per server instance), `prompt`
    (result.prompt_tokens), `computed` (result.computed_prefill_tokens), `hit_tokens`
    (result.prefix_cache_hit_tokens), `reuse_path` (result.prefix_reuse_path), `ts`
    (timestamp_unix_ms, completion time), `seed` (request.sampling.seed)."""

    model_config = ConfigDict(frozen=True)

    request_id: int | str | None = None
    prompt: int | None = None
    computed: int | None = None
    hit_tokens: int | None = None
    reuse_path: str | None = None
    ts: int | None = None
    seed: int | None = None
    finish_reason: str | None = None
    server_instance_id: str | None = None

    @property
    def reuse(self) -> float | None:
        """Output: hit_tokens / prompt, or None when either is unknown (or prompt is 0)."""
        if self.hit_tokens is None or not self.prompt:
            return None
        return self.hit_tokens / self.prompt


class NinferLog(BaseModel):
    """A parsed log: `entries` in file order, and how many lines were `blank` or `unparsable`."""

    model_config = ConfigDict(frozen=True)

    entries: list[LogEntry] = Field(default_factory=list)
    blank: int = 0
    unparsable: int = 0


class LogMatch(BaseModel):
    """`matched`: record id -> its log entry; `unmatched`: record ids with no entry (kept, in record
    order); `extra`: entries no record claimed (e.g. other traffic), in file order."""

    model_config = ConfigDict(frozen=True)

    matched: dict[str, LogEntry] = Field(default_factory=dict)
    unmatched: list[str] = Field(default_factory=list)
    extra: list[LogEntry] = Field(default_factory=list)


def _int(value: Any) -> int | None:
    return value if type(value) is int else (int(value) if type(value) is float else None)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(v: object) -> dict[str, Any]:
    """`v` when it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


def entry_from_row(row: dict[str, Any]) -> LogEntry:
    """Input: one decoded `request_done` row. Output: its `LogEntry` (missing fields None)."""
    request, result = _object(row.get("request")), _object(row.get("result"))
    sampling = _object(request.get("sampling"))
    rid = request.get("request_id")
    return LogEntry(
        request_id=rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None,
        prompt=_int(result.get("prompt_tokens")), computed=_int(result.get("computed_prefill_tokens")),
        hit_tokens=_int(result.get("prefix_cache_hit_tokens")), reuse_path=_str(result.get("prefix_reuse_path")),
        ts=_int(row.get("timestamp_unix_ms")), seed=_int(sampling.get("seed")),
        finish_reason=_str(result.get("finish_reason")), server_instance_id=_str(row.get("server_instance_id")),
    )


def parse_ninfer_lines(lines: Iterable[str]) -> NinferLog:
    """Input: the log's lines. Output: the `request_done` entries in file order plus counts of
    blank and unparsable lines (other events are ignored)."""
    entries: list[LogEntry] = []
    blank = unparsable = 0
    for line in lines:
        if not line.strip():
            blank += 1
            continue
        try:
            row = json.loads(line)
        except ValueError:
            unparsable += 1
            continue
        if not isinstance(row, dict):
            unparsable += 1
        elif row.get("event") == "request_done":
            entries.append(entry_from_row(row))
    return NinferLog(entries=entries, blank=blank, unparsable=unparsable)


def read_ninfer_log(path: str | Path) -> NinferLog:
    """Input: a JSONL file path. Output: the parsed log (see `parse_ninfer_lines`). Raises
    `OSError` when it cannot be read or is not a regular file (a named pipe would block the
    read until a writer closes it: the run's results must not wait on it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe or device: copy the log to "
                          "a file)")
        fh = os.fdopen(fd, encoding="utf-8", errors="replace")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        return parse_ninfer_lines(fh)


def classify_reuse(reuse: float | None, path: str | None) -> ReuseClass:
    """Input: reuse fraction (hit / prompt) and the reuse path. Output: `miss` for a from-scratch
    path (`root`, `full_reset`) or reuse < 0.10; `unknown` when reuse is None; `hit` for
    reuse >= 0.70; otherwise `partial`."""
    if path in NO_REUSE_PATHS:
        return "miss"
    if reuse is None:
        return "unknown"
    if reuse < MISS_BELOW:
        return "miss"
    return "hit" if reuse >= HIT_FROM else "partial"


def _get(record: Any, name: str) -> Any:
    """Output: attribute or mapping key `name` of a record, or None."""
    if isinstance(record, dict):
        return record.get(name)
    return getattr(record, name, None)


def record_time_ms(record: Any) -> float | None:
    """Input: a record. Output: its completion time in unix ms (the log stamps completion):
    `t_end_unix`, else `t_send_unix + e2e_s`, else `t_send_unix`; None without any."""
    end = _get(record, "t_end_unix")
    if isinstance(end, (int, float)):
        return end * 1000.0
    send = _get(record, "t_send_unix")
    if not isinstance(send, (int, float)):
        return None
    e2e = _get(record, "e2e_s")
    return (send + (e2e if isinstance(e2e, (int, float)) else 0.0)) * 1000.0


def _sizes_agree(record: Any, entry: LogEntry) -> bool:
    """Output: False only when both prompt sizes are known and differ."""
    prompt = _get(record, "prompt_tokens")
    return prompt is None or entry.prompt is None or prompt == entry.prompt


class _Matcher:
    """The three matching passes over shared state (which entries are used)."""

    def __init__(self, records: Sequence[Any], entries: Sequence[LogEntry], tolerance_ms: float) -> None:
        self.records = records
        self.entries = entries
        self.tolerance = tolerance_ms
        self.used: set[int] = set()
        self.matched: dict[str, LogEntry] = {}

    def claim(self, record: Any, index: int) -> None:
        self.used.add(index)
        self.matched[str(_get(record, "id"))] = self.entries[index]

    def open_records(self) -> list[Any]:
        return [r for r in self.records if str(_get(r, "id")) not in self.matched]

    def by_seed(self) -> None:
        """Exact join on the sampling seed when both sides have one (engines.md §4.1)."""
        seeds: dict[int, list[int]] = {}
        for i, entry in enumerate(self.entries):
            if entry.seed is not None:
                seeds.setdefault(entry.seed, []).append(i)
        for record in self.open_records():
            seed = _get(record, "seed")
            for i in seeds.get(seed, []) if type(seed) is int else []:
                if i not in self.used and _sizes_agree(record, self.entries[i]):
                    self.claim(record, i)
                    break

    def by_time(self) -> None:
        """Nearest unused entry within the tolerance whose prompt size agrees, records in time order."""
        stamped = sorted((e.ts, i) for i, e in enumerate(self.entries) if e.ts is not None)
        times = [t for t, _ in stamped]
        timed = [(t, r) for r in self.open_records() if (t := record_time_ms(r)) is not None]
        for t, record in sorted(timed, key=lambda pair: pair[0]):
            best = self._nearest(t, record, stamped, times)
            if best is not None:
                self.claim(record, best)

    def _nearest(self, t: float, record: Any, stamped: list[tuple[int, int]], times: list[int]) -> int | None:
        """Output: index of the nearest acceptable entry to time `t`, or None."""
        best, best_dist = None, self.tolerance
        lo = bisect.bisect_left(times, t - self.tolerance)
        hi = bisect.bisect_right(times, t + self.tolerance)
        for ts, i in stamped[lo:hi]:
            dist = abs(ts - t)
            if dist <= best_dist and i not in self.used and _sizes_agree(record, self.entries[i]):
                if best is None or dist < best_dist:
                    best, best_dist = i, dist
        return best

    def by_order(self) -> None:
        """Completion order for what has no timestamp: records without a time (or all open
        records when the log has no timestamps) against the trailing unused entries."""
        log_has_ts = any(e.ts is not None for e in self.entries)
        left = [r for r in self.open_records() if not log_has_ts or record_time_ms(r) is None]
        pool = [i for i in range(len(self.entries)) if i not in self.used]
        if not left or not pool:
            return
        for record, i in zip(left, pool[-len(left):]):
            if _sizes_agree(record, self.entries[i]):
                self.claim(record, i)

    def result(self) -> LogMatch:
        unmatched = [str(_get(r, "id")) for r in self.open_records()]
        extra = [e for i, e in enumerate(self.entries) if i not in self.used]
        return LogMatch(matched=self.matched, unmatched=unmatched, extra=extra)


def match(records: Sequence[Any], entries: Sequence[LogEntry], tolerance_ms: float = 15000) -> LogMatch:
    """Input: client records (objects or dicts with `id`, `t_send_unix` [s] and/or `t_end_unix`
    / `e2e_s`, `prompt_tokens`, optional `seed`) and log entries. Output: the `LogMatch`.

    Passes: (1) equal seeds; (2) nearest timestamp within `tolerance_ms`, known prompt sizes equal
    (a timestamped record with nothing in its window stays unmatched); (3) completion order for
    records or logs without timestamps."""
    matcher = _Matcher(records, entries, tolerance_ms)
    matcher.by_seed()
    matcher.by_time()
    matcher.by_order()
    return matcher.result()
