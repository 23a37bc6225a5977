"""The parts of a results file that describe a run besides its records and gates.

Input: nothing of the runner (like `results`, this module sits at the bottom of the house).
Output: the typed models `results.Results` and `run.runner.Measured` hold: the engine as
discovered (`EngineSummary`), the calibration (`Calibration`), the engine's counters next to the
records' (`MetricsSummary`, with `CounterSnapshot` and the engine log's `EngineLogSummary`), the
client's health (`ClientHealth`, a distributed run's `WorkerHealth` per worker), the measured
hit rate next to the plan's caches (`CacheTheory`), a record's engine-log annotation
(`EngineLogMatch`), and the named value unions of params (`ParamValue`) and report numbers
(`ReportValue`).

A figure a run did not measure is absent from the file, not null (a run without counters has
no `engine_hit_ratio`, a distributed run's `client` holds only the figures its workers gave):
those models are `Sparse`, written with the fields they were given, so a file read and written
again holds the same keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

ParamScalar = bool | int | float | str | None
"""One value a param can hold (a number, a duration in seconds, a string, a flag)."""

ParamValue = ParamScalar | list[ParamScalar]
"""A param's resolved value: a scalar, or a list of them (`lengths: tokens list`)."""

Number = int | float
"""A figure kept as it was measured: a sum of nothing is the integer 0, written as `0`."""

ReportScalar = bool | int | float | str | None
"""One report number as stamped (None: it could not be computed)."""

ReportValue = ReportScalar | dict[str, ReportScalar]
"""A report item's value: a number, or one per group (`report x by phase`)."""


class Sparse(BaseModel):
    """A model written with only the fields it was given (read from a file or set when made):
    a figure not measured stays absent, and a file read and written again keeps its keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Input: the full dump. Output: the fields that were given, in declaration order."""
        data: dict[str, object] = handler(self)
        given = self.model_fields_set
        return {k: v for k, v in data.items() if k in given}


class EngineSummary(BaseModel):
    """The engine as discovery found it (`run.link.EngineLink.engine_fields`): where it is
    (`base_url`, the API key never), the model and engine family, its context limit and where
    that came from, how its tokenizer is reached, whether it is the embedded simulator, its
    slots and whether it reports its own prefill time (None: not known)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    base_url: str = ""
    model: str | None = None
    engine: str | None = None
    max_context: int | None = None
    max_context_source: str | None = None
    tokenizer: str | None = None
    notes: list[str] = []
    sim: bool = False
    slots: int | None = None
    prefill_own: bool | None = None


class Calibration(BaseModel):
    """How a run sized text for the engine and the TTFT reference it judged hits by
    (`run.calibrate`, which fills it in as it measures; docs/verdicts.md)."""

    model_config = ConfigDict(extra="forbid")
    tokens_per_word: float | None = None
    chars_per_token: float | None = None
    sizing: str = "plan"  # vocabulary | tokenizer | usage | plan
    sizing_requests: int = 0
    # the tokenizer calls that checked the filler vocabulary (`vocabulary`), and the words that
    # are not one token each with their cost (None: not checked, or its counts do not add up)
    tokenizer_calls: int = 0
    vocabulary: dict[str, int] | None = None
    threshold_s: float | None = None
    threshold_tokens: int | None = None
    cold_ttft_s: list[float] = []
    hit_ttft_s: list[float] = []
    # prefill speed (uncached tokens per second of the engine's own prefill time, else of what
    # the cold twin's TTFT took beyond a fresh few-word prompt's) of each cold twin measured
    # cleanly (`cold_speed`)
    cold_prefill_tps: list[float] = []
    # with speeds from the TTFT: what any request costs here besides its prefill (each few-word
    # prompt's TTFT): sending, scheduling, the first decode step
    fixed_s: list[float] = []
    # the engine's own prefill time of each cached twin, and of each cold one, when it reports
    # one: what its timing of a prefill that is all but nothing comes to here
    hit_prefill_s: list[float] = []
    cold_prefill_s: list[float] = []
    # of each cold speed above, the time it is over (the engine's prefill time, or the cold
    # twin's TTFT beyond the fastest few-word prompt's): under `resolves` it is noise's
    cold_took_s: list[float] = []
    # the largest cold prompt timed, when even it was too quick to time apart from noise
    too_quick_tokens: int | None = None
    separation: float | None = None
    notes: list[str] = []


class CounterSnapshot(BaseModel):
    """One read of the engine's prefix-cache counters (`run.metrics`): when (`start`, `after
    PHASE`, `end`), the prompt tokens looked up and found so far, and the counter family."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    at: str
    queries_tokens: int
    hits_tokens: int
    family: str


class EngineLogSummary(BaseModel):
    """What joining the engine's own request log to the records found (`wl run --engine-log`,
    `enginelog.annotate`): `matched` / `unmatched` sent records, `not_sent` skipped ones,
    `extra` log entries no record claimed, the ground-truth `classes` of the matched records,
    the records the log contradicts (`suspicious`); `error` when the log could not be read."""

    model_config = ConfigDict(extra="forbid")
    log: str | None = None
    error: str | None = None
    entries: int = 0
    blank_lines: int = 0
    unparsable_lines: int = 0
    tolerance_ms: float = 15000.0
    matched: int = 0
    unmatched: int = 0
    unmatched_ids: list[str] = Field(default_factory=list)
    not_sent: int = 0
    extra: int = 0
    classes: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(
        ("hit", "partial", "miss", "unknown", "cold"), 0))
    suspicious: int = 0
    suspicious_ids: list[str] = Field(default_factory=list)


class MetricsSummary(Sparse):
    """The engine's counters over the run next to what the records say (`run.runner`): the
    counters read (`snapshots`), the records' prompt and cached tokens and the sent requests
    without the engine's count; with counters at both ends, the engine's hits, queries and hit
    ratio over the run; `unavailable`: why a read failed; `engine_log`: the engine log's join."""

    snapshots: list[CounterSnapshot] = []
    records_cached_tokens: int = 0
    records_prompt_tokens: int = 0
    records_uncounted: int = 0
    records_uncounted_planned_tokens: int = 0
    unavailable: str | None = None
    engine_hits_tokens: int | None = None
    engine_queries_tokens: int | None = None
    engine_hit_ratio: float | None = None
    engine_log: EngineLogSummary | None = None


class HealthFigures(Sparse):
    """The client's health over a run, as one process measured it (`run.health`, docs/client.md):
    the event loop's lag, the client's delay in sending (and of its worst: when, the sends
    meanwhile, the collector's share), the first-token stamps that may be late, the collector's
    longest pause, what isolated and re-measured requests cost, the waits for a quiet client,
    how late planned sends went and the CPU time (ms figures in milliseconds; None: nothing to
    measure)."""

    loop_lag_p99_ms: Number | None = None
    loop_lag_max_ms: Number | None = None
    loop_lag_max_ran_ms: Number | None = None
    loop_lag_max_at_s: Number | None = None
    client_delay_p99_ms: Number | None = None
    client_delay_max_ms: Number | None = None
    client_delay_max_at_s: Number | None = None
    client_delay_max_sends_meanwhile: int | None = None
    client_delay_max_gc_ms: Number | None = None
    client_delay_over_10ms: int | None = None
    ttft_late: int | None = None
    ttft_late_max_ms: Number | None = None
    gc_pause_max_ms: Number | None = None
    gc_pause_max_generation: int | None = None
    isolated_requests: int | None = None
    isolation_wait_s: Number | None = None
    isolation_held_s: Number | None = None
    isolation_active_s: Number | None = None
    remeasured_requests: int | None = None
    remeasures: int | None = None
    remeasure_s: Number | None = None
    remeasure_prompt_tokens: int | None = None
    remeasure_cached_tokens: int | None = None
    stretches_again: int | None = None
    stretches_again_kept: int | None = None
    pressure_again: int | None = None
    quiet_waits: int | None = None
    quiet_wait_s: Number | None = None
    scheduled: int | None = None
    schedule_lag_p50_ms: Number | None = None
    schedule_lag_p99_ms: Number | None = None
    schedule_lag_max_ms: Number | None = None
    schedule_late: int | None = None
    cpu_s: Number | None = None
    client_bottleneck: bool | None = None


class WorkerHealth(HealthFigures):
    """One worker of a distributed run (`scale/`): which, where (`pid`, `node`), its sessions
    and concurrency, its records, its clock against the driver's, how late it started, why it
    is incomplete, its health figures, its CPU per request, and why it was lost (`lost`)."""

    worker: int
    pid: int | None = None
    node: str | None = None
    node_id: str | None = None
    sessions: list[str] = []
    concurrency: int | None = None
    records: int | None = None
    clock_offset_s: float | None = None
    clock_offset_error_s: float | None = None
    clock_samples: int | None = None
    start_late_s: float | None = None
    incomplete: str | None = None
    cpu_per_request_ms: float | None = None
    lost: str | None = None


class ClientHealth(HealthFigures):
    """The results' `client`: the health figures (of a distributed run: the counts summed and
    every other figure its worst worker's), and the gates a busy client could have moved
    (`gates_client_could_move`); of a distributed run, the workers that were a bottleneck,
    each worker's own figures and the sharding's notes."""

    gates_client_could_move: list[str] | None = None
    bottleneck_workers: list[int] | None = None
    workers: list[WorkerHealth] | None = None
    sharding_notes: list[str] | None = None


class CacheTheory(Sparse):
    """The measured hit rate next to the perfect and LRU caches' (`theory.cache_theory`), over
    the requests with a cached count: their prompt, cached, planned and expected tokens, what
    any order of the run's requests could have served (`upper_cached_tokens`), what was served
    beyond it (`served_before_run_tokens`), the rates (None: nothing to divide by) and whether
    the measured rate lies within what the run allows (`range`)."""

    requests: int = 0
    concurrency: int = 1
    traced: bool = False
    in_flight: int | None = None
    cache_tokens: int | None = None
    cache_block: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    planned_prompt_tokens: int = 0
    expected_cached_tokens: int = 0
    expected_cached_max_tokens: int = 0
    lru_cached_tokens: int | None = None
    upper_cached_tokens: int | None = None
    served_before_run_tokens: int = 0
    measured: float | None = None
    unlimited: float | None = None
    unlimited_max: float | None = None
    certain_cached_tokens: int | None = None
    certain: float | None = None
    possible: float | None = None
    range: str | None = None
    lru: float | None = None

    @property
    def overlap(self) -> int:
        """The most requests in flight at once (`in_flight`; a file without it: `concurrency`)."""
        return self.in_flight if self.in_flight is not None else self.concurrency


class EngineLogMatch(BaseModel):
    """A record's entry in the engine's own request log (`Record.engine_log`): its id there,
    the tokens the engine computed and found cached, its reuse path, the ground-truth class
    (hit / partial / miss / unknown / cold) and reuse (docs/verdicts.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    request_id: int | str | None = None
    computed: int | None = None
    hit_tokens: int | None = None
    reuse_path: str | None = None
    reuse_class: str
    ground_truth_reuse: float | None = None
