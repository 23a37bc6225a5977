"""The results contract: what a run produces and what every later stage reads.

Input: nothing of the runner (this module imports no runner code, no HTTP). Output: the types a
run writes and `wl report` / `wl compare` / the gates read: `Record` (one JSON line of
`--records` per planned request), `GateResult` / `ScopeResult` (a gate's verdicts), `Results`
(the summary JSON of `--output`, read back by `read_results`), the request error kinds
(`ErrorKind`), the one set of exit codes (`ExitCode`, docs/cli.md), and `Sink`, where a run
gives its records and events as they happen.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError


class ExitCode(enum.IntEnum):
    """The exit codes of `wl` (docs/cli.md)."""

    OK = 0  # the gates passed (or nothing to judge: check, plan, list, report)
    GATE = 1  # a gate failed
    USAGE = 2  # usage or workload error
    ENDPOINT = 3  # the endpoint is unreachable or lacks a capability
    INCOMPLETE = 4  # the run is incomplete
    WRITE = 5  # a file asked for went to a fallback path (stderr names it)
    INTERRUPTED = 130  # interrupted (after writing what was measured)


ErrorKind = Literal["http", "connect", "timeout", "stream_cut", "malformed", "engine", "early_stop",
                    "overrun", "idle", "interrupted"]
"""Why a request did not complete normally:

* `http`: the server answered with a status >= 400;
* `connect`: no response at all (refused, DNS, reset before the headers);
* `timeout`: the request's total deadline passed;
* `stream_cut`: the stream ended (or broke) without `[DONE]` and without a finish_reason;
* `malformed`: a chunk was not valid JSON (later chunks were still read);
* `engine`: the engine reported an error inside the stream (`{"error": ...}` or `event: error`);
* `early_stop`: an abort was planned but the stream finished before the abort target;
* `overrun`: the answer went past its bounds (many more token events than `max_tokens`, more
  bytes than such an answer can hold, an SSE line without end): the rest was not read;
* `idle`: the answer sent nothing for the idle timeout after its first token;
* `interrupted`: the run was stopped (Ctrl-C, SIGTERM) while the request was in flight.
"""


class ErrorDetail(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: str
    message: str
    status: int | None = None


class Record(BaseModel):
    """One JSON line of `--records`: planned, reported and derived numbers for one request."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["request"] = "request"
    id: str
    seq: int
    session: str
    phase: str
    label: str
    index: int
    kind: str
    line: int
    # the plan
    planned_prompt_tokens: int
    planned_expected_cached: int
    planned_lru_cached: int | None = None  # with --cache-tokens: what the plan's LRU cache serves
    # the planned send time of a trace request or an arrival's first, s from the start
    planned_send_at: float | None = None
    # of a request with a planned send time: how much later it was sent (waits for a place
    # among its session's copies, for a concurrency slot, and the client's own delay)
    schedule_lag_s: float | None = None
    # what a perfect cache could serve if requests of concurrent sessions finished first (the
    # plan's `exp. max`; None when no more than `planned_expected_cached`)
    planned_expected_max: int | None = None
    new_tokens: int
    max_tokens: int
    abort_after: int | None = None
    prefix_source: str | None = None
    # what the engine reported
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cached_source: str = "none"
    completion_tokens: int | None = None
    streamed_tokens: int = 0
    server_ttft_ms: float | None = None
    server_prefill_ms: float | None = None
    finish_reason: str | None = None
    # what the client measured
    t_start_s: float | None = None
    t_send_unix: float | None = None
    ttft_s: float | None = None
    ttft_content_s: float | None = None
    ttft_late_s: float | None = None  # the first token's stamp may be this late (client.Outcome)
    # of the TTFT, how long other requests of the run were in flight (run.contention): time the
    # engine may have spent on them, not on this prefill
    ttft_contended_s: float | None = None
    # of the engine's own prefill time (`prefill_source: server`), how long other requests of
    # the run were in flight: time its batches may have shared (0 on a one-slot engine)
    prefill_contended_s: float | None = None
    # `isolated`: timed alone (run.isolation): it waited `isolation_wait_s` for the run's
    # requests in flight to end; `isolation_held_s`: how long another session's isolation
    # held this request back
    isolated: bool = False
    isolation_wait_s: float | None = None
    isolation_held_s: float | None = None
    e2e_s: float | None = None
    aborted: bool = False
    error: ErrorDetail | None = None
    skipped: str | None = None
    # derived
    expected_cached: int | None = None
    expected_source: str | None = None
    reuse: float | None = None
    missed: int | None = None
    uncached_tokens: int | None = None
    hit: bool | None = None
    hit_basis: str | None = None
    ttft_agrees: bool | None = None
    ttft_agrees_note: str | None = None  # why `ttft_agrees` could not be judged
    pp_tps: float | None = None
    tg_tps: float | None = None
    ttft_per_uncached: float | None = None
    prefill_s: float | None = None
    prefill_source: str | None = None
    expect_ok: bool | None = None
    reply_excerpt: str = ""
    suspicious: list[str] = []
    # counts no engine can report (`impossible_counts`): they were set aside as unknown
    impossible: str | None = None
    engine_log: dict[str, Any] | None = None

    @property
    def warm(self) -> bool:
        """Planned warm: a perfect cache would serve at least half of the prompt (the same rule
        as the `warm` selector flag, `selector.is_warm`)."""
        return 0 < self.planned_prompt_tokens <= 2 * self.planned_expected_cached


Status = Literal["pass", "fail", "unknown"]


class ScopeResult(BaseModel):
    """One scope of a gate. Of the values it read: `exact` ones, `ranges` (a first-token stamp
    that may be late, a prefill that may hold others' work: `Span`), `unknown` ones (not
    reported, errored, not judged: `unknown_ids`). The gate is judged over every value the
    ranges and the unknown values allow. `not_applicable`: 1 when the gate's `when` condition
    is false here (the gate does not apply: status `pass`, the detail says why), else 0."""
    scope: str
    status: Status
    value: Any = None
    threshold: Any = None
    reads: int = 0
    exact: int = 0
    ranges: int = 0
    unknown: int = 0
    unknown_ids: list[str] = []
    not_applicable: int = 0
    detail: str = ""


class GateResult(BaseModel):
    """A gate over all its scopes; `exact`, `ranges`, `unknown`: the values read, summed;
    `not_applicable`: the scopes where its `when` condition was false."""
    name: str
    scope: str
    severity: str
    verdict: str | None
    line: int
    status: Status
    results: list[ScopeResult]
    exact: int = 0
    ranges: int = 0
    unknown: int = 0
    not_applicable: int = 0

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class Results(BaseModel):
    """The summary JSON of one run (`--output`)."""

    schema_: str = "workloadlang.results/1"
    workload: str
    source: str
    params: dict[str, Any]
    salt: str
    plan_hash: str
    engine: dict[str, Any]
    started_at: str
    elapsed_s: float
    hit_ratio: float
    calibration: dict[str, Any]
    metrics: dict[str, Any]
    client: dict[str, Any]
    incomplete: str | None
    exit_code: int
    gates: list[GateResult]
    verdicts: dict[str, str]
    report: dict[str, Any]
    report_format: dict[str, str] = {}
    impossible: int = 0  # records whose counts no engine can report (`Record.impossible`)
    # measured hit rate next to the perfect and LRU caches' (`theory.cache_theory`)
    cache_theory: dict[str, Any] | None = None
    records: list[Record]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, by_alias=False).replace('"schema_"', '"schema"', 1)


class ResultsFileError(ValueError):
    """A file that is not a readable results file; the message is one line saying why."""


def read_results(path: str | Path) -> Results:
    """A results file (`wl run --output`) as `Results`. Raises `ResultsFileError` with a
    one-line reason: unreadable, empty, cut short, not JSON, or not a results file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise ResultsFileError(f"cannot read {path}: {e.strerror or e}") from None
    if not raw.strip():
        raise ResultsFileError(f"{path} is empty (a run stopped before writing its results "
                               "leaves nothing; its --records JSONL has every completed request)")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ResultsFileError(f"{path} is not JSON or was cut short ({e}); a run killed while "
                               "writing it leaves such a file, its --records JSONL has every "
                               "completed request") from None
    return _results_of(data, str(path))


def _results_of(data: Any, path: str) -> Results:
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path} is not a workloadlang results file (not a JSON object)")
    if "schema" in data:
        data["schema_"] = data.pop("schema")
    schema = data.get("schema_", "")
    if not isinstance(schema, str) or not schema.startswith("workloadlang.results/"):
        raise ResultsFileError(f"{path} is not a workloadlang results file (schema {schema!r})")
    try:
        return Results.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ResultsFileError(f"{path} is not a valid results file ({where}: {first['msg']}; "
                               f"{e.error_count()} problem(s))") from None


class Sink(Protocol):
    """Where a run gives each record the moment it is kept, and its events (`plan`,
    `calibration`, `metrics`, `gate`, `summary`, `note`) as they happen."""

    def record(self, rec: Record) -> None: ...

    def event(self, kind: str, data: dict[str, Any]) -> None: ...


class ListSink:
    """A sink that keeps what it is given: `records` and `events` (`(kind, data)`) in order. For
    callers that drive a run themselves (benches, tests) and read the records after."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def record(self, rec: Record) -> None:
        self.records.append(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))
