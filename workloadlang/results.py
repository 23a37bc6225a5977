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

from workloadlang.resultsmodels import (
    CacheTheory,
    Calibration,
    ClientHealth,
    EngineLogMatch,
    EngineSummary,
    MetricsSummary,
    ParamValue,
    ReportValue,
)

SCHEMA = "workloadlang.results/2"
"""The schema version a results file carries (`docs/results-schema.json`)."""

PREVIOUS_SCHEMAS = ("workloadlang.results/1",)
"""Earlier versions `read_results` still reads: version 1 holds the same fields, untyped in its
published form; it is read as it is and carries the current version once read."""


class ExitCode(enum.IntEnum):
    """The exit codes of `wl` (docs/cli.md)."""

    OK = 0  # the gates passed (or nothing to judge: check, plan, list, report)
    GATE = 1  # a gate failed
    USAGE = 2  # usage or workload error
    ENDPOINT = 3  # the endpoint is unreachable or lacks a capability
    INCOMPLETE = 4  # the run is incomplete
    WRITE = 5  # a file asked for went to a fallback path (stderr names it)
    # no gate failed, but a fail-severity gate could not be judged (or not at these sizes):
    # neither a pass CI could take for one, nor a failure of the engine
    UNVERIFIED = 6
    INTERRUPTED = 130  # interrupted (after writing what was measured)


DRIFT_ALLOWANCE = 1.5
"""Two requests that decoded per token within this factor of each other ran on the same machine
as far as a verdict can tell (`Record.drift`); beyond it, the machine's speed drifted between
them."""


ErrorKind = Literal["http", "connect", "timeout", "stream_cut", "malformed", "engine", "early_stop",
                    "overrun", "idle", "interrupted", "lost"]
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
* `interrupted`: the run was stopped (Ctrl-C, SIGTERM) while the request was in flight;
* `lost`: the worker of a distributed run that sent it died (or failed) before its answer was
  recorded: it was sent, its outcome is unknown.
"""


class Spread(BaseModel):
    """A set of values by its percentiles (`latency.spread`: linear interpolation between order
    statistics), with its count, least, mean and largest."""

    model_config = ConfigDict(frozen=True)
    n: int
    min: float
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float


class Slo(BaseModel):
    """The service-level objectives a request must meet to count towards goodput (`slo { }`):
    bounds in seconds on its TTFT, its time per output token and its end-to-end latency (None:
    no bound), and the share of requests that must meet them all for a rate to count as
    sustained (`attainment`; docs/metrics.md)."""

    model_config = ConfigDict(frozen=True)
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    attainment: float = 0.9


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
    # among its session's copies, for a concurrency slot, and the client's own delay), counted
    # from its phase's barrier when that opened after its send time
    schedule_lag_s: float | None = None
    # what a perfect cache could serve if requests of concurrent sessions finished first (the
    # plan's `exp. max`; None when no more than `planned_expected_cached`)
    planned_expected_max: int | None = None
    new_tokens: int
    max_tokens: int
    abort_after: int | None = None
    prefix_source: str | None = None
    # the branches of parallel forks it is in (`FORK.BRANCH/...`, as the dry-run's `lane`)
    lane: str = ""
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
    # measured again alone (run.remeasure): the sends it took, and why each earlier one was
    # not kept (a stamp that may be late, a machine that ran slower), with its times
    attempts: int = 1
    remeasured: list[str] = []
    # of a request timed alone after the first of its stretch (`drift_of`): how many times
    # slower it decoded per token than that one (the machine's speed then against now)
    drift: float | None = None
    drift_of: str | None = None
    e2e_s: float | None = None
    # every gap between two token events' arrivals, in order (`itl`: their spread), the time
    # per output token after the first ((e2e - ttft) / (completion tokens - 1)) and the output
    # tokens per second of the whole request (docs/metrics.md)
    itl_s: list[float] | None = None
    itl: Spread | None = None
    tpot_s: float | None = None
    output_tps: float | None = None
    # met every SLO of the workload (None: no SLO, or not sent); sent in the run's warm-up or
    # cool-down window, so left out of every metric (`window`, None: measured)
    slo_met: bool | None = None
    window: Literal["warmup", "cooldown"] | None = None
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
    # when it could not be judged because the prompt is too small for timing to tell on this
    # engine: the least prompt (tokens) whose cold prefill would
    decides_at: int | None = None
    # of a request timed alone that prefills tokens of its own (a finalize, a baseline): when
    # they are too few for its time to price a token here (their prefill within what a timing
    # resolves), the least that would; its prefill time is then not read
    priced_at: int | None = None
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
    engine_log: EngineLogMatch | None = None

    @property
    def warm(self) -> bool:
        """Planned warm: a perfect cache would serve at least half of the prompt (the same rule
        as the `warm` selector flag, `selector.is_warm`)."""
        return 0 < self.planned_prompt_tokens <= 2 * self.planned_expected_cached


# `undecidable`: unknown only because what it read cannot tell at these sizes on this engine
# (`Record.decides_at`): its own state, not a failure (docs/verdicts.md)
Status = Literal["pass", "fail", "unknown", "undecidable"]


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
    `not_applicable`: the scopes where its `when` condition was false; `kind`: the kind of
    what it compares (`duration`, `ratio`, `number`, `bool`; None: not told), which says how
    its value and threshold are shown."""
    name: str
    scope: str
    severity: str
    verdict: str | None
    line: int
    status: Status
    results: list[ScopeResult]
    kind: str | None = None
    exact: int = 0
    ranges: int = 0
    unknown: int = 0
    not_applicable: int = 0

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class Concurrency(BaseModel):
    """Requests of the run in flight (sent, not yet answered to their end) over time: the most
    at once, the time-weighted mean over the measured window, and `series`: the most in each
    of up to `latency.SERIES_BINS` equal stretches of the run, as (its start in seconds from
    the run's start, requests)."""

    model_config = ConfigDict(frozen=True)
    max: int
    mean: float
    series: list[tuple[float, int]] = []


class Goodput(BaseModel):
    """Requests that met every SLO (`Record.slo_met`) among those measured: how many, their
    share (`attainment`), their rate per second of the measured window (`rate`, the goodput),
    and whether the share reached the SLOs' `attainment` (`sustained`)."""

    model_config = ConfigDict(frozen=True)
    slo: Slo
    met: int
    judged: int
    attainment: float | None = None
    rate: float | None = None
    sustained: bool | None = None


class Performance(BaseModel):
    """A run's latency and throughput (docs/metrics.md), over its measured requests: those sent
    outside its warm-up and cool-down windows (`excluded`: those left out). The measured window
    is from the first of them sent to the last of them answered (`window_s`). Rates are per
    second of it; `ttft`, `tpot`, `e2e`, `output_tps` spread over the requests answered without
    error, `itl` over every gap of theirs; `schedule_lag` over the requests with a planned send
    time (how late they went: a rate the engine could not keep up with). `hit_rate`: the
    prompt tokens served from cache over the same requests (those whose count the engine gave),
    next to the goodput."""

    model_config = ConfigDict(frozen=True)
    window_s: float | None = None
    requests: int = 0
    completed: int = 0
    excluded: int = 0
    request_rate: float | None = None
    hit_rate: float | None = None  # cached of the prompt tokens, where the engine said
    input_tps: float | None = None
    output_tps: float | None = None
    ttft: Spread | None = None
    itl: Spread | None = None
    tpot: Spread | None = None
    e2e: Spread | None = None
    output_tps_per_request: Spread | None = None
    schedule_lag: Spread | None = None
    concurrency: Concurrency | None = None
    goodput: Goodput | None = None


class Results(BaseModel):
    """The summary JSON of one run (`--output`; its JSON schema: `docs/results-schema.json`)."""

    model_config = ConfigDict(extra="forbid")
    schema_: str = SCHEMA
    workload: str
    source: str
    params: dict[str, ParamValue]
    salt: str
    plan_hash: str
    engine: EngineSummary
    started_at: str
    elapsed_s: float
    hit_ratio: float
    calibration: Calibration
    metrics: MetricsSummary
    client: ClientHealth
    incomplete: str | None
    exit_code: int
    gates: list[GateResult]
    verdicts: dict[str, str]
    report: dict[str, ReportValue]
    report_format: dict[str, str] = {}
    impossible: int = 0  # records whose counts no engine can report (`Record.impossible`)
    # measured hit rate next to the perfect and LRU caches' (`theory.cache_theory`)
    cache_theory: CacheTheory | None = None
    # latency, throughput and goodput over the measured requests (`latency.performance`)
    performance: Performance | None = None
    records: list[Record]

    def to_json(self) -> str:
        """Output: the results file's text (indented JSON, the version under `schema`)."""
        return self.model_dump_json(indent=2, by_alias=False).replace('"schema_"', '"schema"', 1)


def results_schema() -> dict[str, Any]:
    """Output: the JSON schema of a results file of this version, generated from `Results`
    (published as `docs/results-schema.json`; docs/cli.md, "The results file's schema"): the
    models' fields under their names in the file (`schema` holds the version)."""
    schema = Results.model_json_schema(mode="validation")
    props = schema["properties"]
    props.pop("schema_")
    version = {"const": SCHEMA, "title": "Schema",
               "description": "The version of the results file's schema."}
    schema["properties"] = {"schema": version, **props}
    schema["required"] = ["schema", *schema.get("required", [])]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA, **schema}


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
    return results_of(data, str(path))


def results_of(data: Any, path: str) -> Results:
    """The `Results` of a results file's decoded JSON `data` (`path`: the file, for messages);
    a file of an earlier version (`PREVIOUS_SCHEMAS`) is upgraded to this one. Raises
    `ResultsFileError` with a one-line reason when it is not a results file, or one of a
    version this code does not read."""
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path} is not a workloadlang results file (not a JSON object)")
    if "schema" in data:
        data["schema_"] = data.pop("schema")
    schema = data.get("schema_", "")
    if not isinstance(schema, str) or not schema.startswith("workloadlang.results/"):
        raise ResultsFileError(f"{path} is not a workloadlang results file (schema {schema!r})")
    if schema in PREVIOUS_SCHEMAS:
        data["schema_"] = SCHEMA
    elif schema != SCHEMA:
        raise ResultsFileError(f"{path} is a results file of version {schema!r}, which this "
                               f"workloadlang does not read (it reads {SCHEMA!r} and "
                               f"{', '.join(map(repr, PREVIOUS_SCHEMAS))}): read it with the "
                               "workloadlang that wrote it, or a newer one")
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
