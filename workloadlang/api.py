"""The front door: chain the stages, and expose each intermediate result.

    source = load("agent-sim")                 # a bundled name or a path
    wl = parse_checked(source)                  # ir.Workload, or WorkloadError
    plan = make_plan(wl, source, {"sessions": "2"}, salt="s1", env={"max_context": 32768})
    runs = plan_runs(wl, source, PlanOptions(sweep="sessions=1,2,4"))  # a sweep's points
    async with open_engine("http://127.0.0.1:8000/v1") as engine:
        plan = make_plan(wl, source, {}, env={"max_context": engine.info.max_context})
        results = await run_workload(plan, engine, sink, RunOptions(time_budget_s=60))

A rate search (`RateSearch`) plans its points one at a time, each value from how the runs
before it went. Input: workload text and its name; an engine's URL. Output: `ir.Workload`,
`Plan`, `Results`.
Errors are `WorkloadError` carrying `Diagnostic`s (`EndpointError` for an engine that cannot be
used); nothing here prints.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from workloadlang import bounds, ir
from workloadlang.check import check
from workloadlang.diagnostics import Diagnostic, WorkloadError
from workloadlang.evaluate import resolve_params
from workloadlang.parse import parse
from workloadlang.plan import sweeppoints
from workloadlang.plan.assemble import build_plan
from workloadlang.plan.draws import fresh_salt as fresh_salt  # re-exported: wl run uses it
from workloadlang.plan.limits import Budget, Limits
from workloadlang.plan.model import CacheModel, Plan
from workloadlang.plan.sweeppoints import (
    SweepError as SweepError,  # re-exported: plan_runs raises it
)
from workloadlang.resources import bundled_workload_path, bundled_workloads
from workloadlang.results import ExitCode, ListSink, Results, Sink
from workloadlang.resultsmodels import EngineSummary
from workloadlang.run.errors import (
    EndpointError as EndpointError,  # re-exported: open_engine raises it
)
from workloadlang.run.runoptions import (
    RunOptions as RunOptions,  # re-exported: run_workload takes it
)
from workloadlang.theory import cache_theory

if TYPE_CHECKING:  # `wl plan` imports this module: these only when used
    from workloadlang.ratesearch import SearchSpec, Tried
    from workloadlang.run.calibrate import Calibration
    from workloadlang.run.link import EngineLink
    from workloadlang.run.runner import Measured, Shared
    from workloadlang.sweepresults import SweepResults


@dataclass(frozen=True)
class Source:
    name: str  # shown in diagnostics: the path, or the bundled name
    text: str


class NotFound(Exception):
    pass


def load(target: str) -> Source:
    """A `.wl` path, or the name of a bundled workload (`agent-sim`). Raises `NotFound` when
    there is neither (or the file cannot be read), `WorkloadError` when the file is no `.wl`
    text (`bounds.decode`: too large, not UTF-8)."""
    p = Path(target)
    if p.is_file():
        return Source(name=str(p), text=read_source(p, str(p)))
    bundled = bundled_workload_path(target)
    if bundled is not None:
        return Source(name=f"{target}.wl", text=bundled.read_text(encoding="utf-8"))
    names = ", ".join(n for n, _ in bundled_workloads())
    raise NotFound(f"no file or bundled workload named `{target}` (bundled: {names})")


def read_source(path: Path, name: str) -> str:
    """The text of a `.wl` file, read up to `bounds.MAX_FILE_BYTES` (one byte more tells it is
    over). Raises `NotFound` (unreadable) or `WorkloadError` (WL109, WL110)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(bounds.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise NotFound(f"cannot read `{name}`: {exc.strerror or exc}") from None
    text = bounds.decode(data, name)
    if isinstance(text, Diagnostic):
        shown = data[:bounds.MAX_LINE_CHARS].decode("utf-8", errors="replace")
        raise WorkloadError([text], text=shown)
    return text


def parse_checked(source: Source, flags: Collection[str] = ()) -> ir.Workload:
    """The checked workload, or `WorkloadError` with every error. `flags`: the options of the
    command that runs it (`output` for `--output`), which no param may be named like."""
    wl = parse(source.text, source.name)
    diags = [d for d in check(wl, flags) if d.severity == "error"]
    if diags:
        raise WorkloadError(diags)
    return wl


def make_plan(wl: ir.Workload, source: Source, overrides: Mapping[str, str],
              salt: str | None = None, env: Mapping[str, Any] | None = None, *,
              limits: Limits | None = None, cache: CacheModel | None = None,
              budget: Budget | None = None) -> Plan:
    """Resolve the params, load the traces the workload's sessions replay and the datasets
    its messages take text from, plan.
    `limits`: the planner's size limits (default `Limits()`); `cache`: the LRU cache whose
    figures the plan carries (`--cache-tokens`); `budget`: what the plan counts against, when
    not a budget of its own (a sweep's points share one: `plan_runs`)."""
    env = planning_env(env)
    params, diags = resolve_params(wl, overrides, env)
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise WorkloadError(errors)
    limits = limits or Limits()
    return build_plan(wl, params, salt or fresh_salt(), source=source.name, env=env,
                      limits=limits, traces=load_traces(wl, {**env, **params}, limits),
                      cache=cache, budget=budget, datasets=load_datasets(wl, {**env, **params}))


def load_datasets(wl: ir.Workload, env: Mapping[str, Any]) -> dict[str, Any]:
    """The datasets the workload's messages take text from, read here (the planner reads no
    file). Raises `WorkloadError` (WL420) for a file that cannot be used."""
    if not wl.datasets:
        return {}
    from workloadlang import dataset

    return dataset.load_for(wl, env)


@dataclass(frozen=True)
class Replan:
    """A plan made again with more of the environment (`RunOptions.replan`): `wl run` plans
    first, calibrates, and then plans with what the calibration learnt (`$timing_tokens`), the
    same params and salt. Called with the environment to add; output: the `Plan`. Raises
    `WorkloadError` as `make_plan` does."""

    wl: ir.Workload
    source: Source
    overrides: Mapping[str, str]
    salt: str
    env: Mapping[str, Any]
    limits: Limits | None = None
    cache: CacheModel | None = None

    def __call__(self, more: Mapping[str, Any]) -> Plan:
        return make_plan(self.wl, self.source, self.overrides, self.salt, {**self.env, **more},
                         limits=self.limits, cache=self.cache)


def planning_env(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """The built-in refs a plan is made with: `env` over what is known before an engine is
    reached (`$max_context` None: not known; `$timing_tokens` 0: no calibration yet)."""
    return {"max_context": None, "timing_tokens": 0, **(env or {})}


def load_traces(wl: ir.Workload, env: Mapping[str, Any], limits: Limits) -> dict[str, Any]:
    """The trace of each trace session, read here (the planner reads no file)."""
    if not any(getattr(s, "trace", None) is not None for s in wl.sessions):
        return {}
    from workloadlang import tracefile

    return tracefile.load_for(wl, env, limits)


def warnings(wl: ir.Workload, flags: Collection[str] = ()) -> list[Diagnostic]:
    return [d for d in check(wl, flags) if d.severity != "error"]


# ---------------------------------------------------------------- sweeps and rate searches


@dataclass(frozen=True)
class PlanOptions:
    """What to plan a workload with, beyond its text: the params set (`overrides`: name ->
    text, as on the command line), the sweep asked for (`NAME=V1,V2,...`; None: the file's own
    `sweep [...]` of a param not set, if any), the salt (None: a fresh one), the planner's size
    limits and the LRU cache whose figures the plans carry (`--cache-tokens`)."""

    overrides: Mapping[str, str] = field(default_factory=dict)
    sweep: str | None = None
    salt: str | None = None
    limits: Limits = field(default_factory=Limits)
    cache: CacheModel | None = None


@dataclass(frozen=True)
class PlannedRuns:
    """The plans of a run: one (`swept` None), or one per value of the param swept, in order
    (`swept`: the param and its values as given), and for each how to make it again with what
    the calibration learns (`replans`: the same params and salt)."""

    swept: tuple[str, list[str]] | None
    plans: list[Plan]
    replans: list[Replan]


def sweep_of(wl: ir.Workload, options: PlanOptions) -> tuple[str, list[str]] | None:
    """The param `options` sweep `wl` over and its values (`plan.sweeppoints.points`), or None.
    Raises `SweepError` for a sweep that cannot be run (a usage error)."""
    return sweeppoints.points(wl, options.overrides, options.sweep)


def plan_runs(wl: ir.Workload, source: Source, options: PlanOptions,
              env: Mapping[str, Any] | None = None, *, keep_all: bool = True) -> PlannedRuns:
    """The plans of `wl` (`make_plan`): one, or one per point of its sweep (`sweep_of`), each
    with its own salt (`plan.sweeppoints.salts`), all planned into one budget (together within
    the limits). `keep_all` False: of the points after the first, only what a row of `wl plan`
    lists (`plan.sweeppoints.row_only`). Raises `SweepError`, `WorkloadError`."""
    swept = sweep_of(wl, options)
    salt = options.salt or fresh_salt()
    if swept is None:
        plan = make_plan(wl, source, options.overrides, salt=salt, env=env,
                         limits=options.limits, cache=options.cache)
        return PlannedRuns(None, [plan], [_replan(wl, source, options, options.overrides,
                                                  plan, env)])
    name, budget, plans, replans = swept[0], Budget(options.limits), [], []
    for i, (v, s) in enumerate(zip(swept[1], sweeppoints.salts(salt, name, swept[1]))):
        budget.next_point(f"{name}={v}")
        overrides = {**options.overrides, name: v}
        plan = make_plan(wl, source, overrides, salt=s, env=env,
                         limits=options.limits, cache=options.cache, budget=budget)
        plans.append(plan if keep_all or not i else sweeppoints.row_only(plan))
        replans.append(_replan(wl, source, options, overrides, plan, env))
    return PlannedRuns(swept, plans, replans)


def _replan(wl: ir.Workload, source: Source, options: PlanOptions,
            overrides: Mapping[str, str], plan: Plan,
            env: Mapping[str, Any] | None) -> Replan:
    """How to make `plan` again with more of the environment: its params and salt."""
    return Replan(wl, source, overrides, plan.salt, env or {}, options.limits, options.cache)


def check_runs(wl: ir.Workload, options: PlanOptions,
               env: Mapping[str, Any] | None = None) -> None:
    """Raises `SweepError` for a sweep `options` ask for that cannot be run, `WorkloadError`
    when the params of the run (of each point of a sweep) do not resolve (`check_params`):
    what `plan_runs` would refuse before it plans anything, checked without an engine."""
    swept = sweep_of(wl, options)
    for point in [{}] if swept is None else [{swept[0]: v} for v in swept[1]]:
        check_params(wl, {**options.overrides, **point}, env)


def check_params(wl: ir.Workload, overrides: Mapping[str, str],
                 env: Mapping[str, Any] | None = None) -> None:
    """Raises `WorkloadError` when the params `overrides` sets do not resolve (a bad value, a
    value out of range), before an engine is reached. A param that needs the engine's context
    limit while `env` does not know it (WL407) leaves the params to `make_plan`, which learns
    it from the engine."""
    _, diags = resolve_params(wl, overrides, planning_env(env))
    if any(d.code == "WL407" for d in diags):
        return
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise WorkloadError(errors)


@dataclass(frozen=True)
class SearchPoint:
    """A point of a rate search: the value tried, as the command line would give it, and its
    plan."""

    value: float
    text: str
    plan: Plan


class RateSearch:
    """A rate search's points (`wl run --search`), planned one at a time: `next_point` plans the
    value `ratesearch.next_value` asks for from how the points before it went (its salt
    `point_salt` of the search's), `record` tells how a point's run went, `results` is the
    search's `SweepResults` (points in the order of their values, with the `Search`)."""

    def __init__(self, wl: ir.Workload, source: Source, options: PlanOptions,
                 spec: SearchSpec, env: Mapping[str, Any] | None = None):
        self.wl, self.source, self.options, self.spec, self.env = wl, source, options, spec, env
        self.salt = options.salt or fresh_salt()
        self.tried: list[Tried] = []
        self.points: list[tuple[float, str, Results]] = []

    def next_point(self) -> SearchPoint | None:
        """The next point to run, planned; None when the search is done. Raises
        `WorkloadError` when its plan cannot be made."""
        from workloadlang.ratesearch import next_value

        spec = self.spec
        v = next_value(self.tried, spec.low, spec.high, spec.precision, spec.whole,
                       spec.max_runs)
        if v is None:
            return None
        text = spec.text(v)
        plan = make_plan(self.wl, self.source, {**self.options.overrides, spec.param: text},
                         salt=sweeppoints.point_salt(self.salt, spec.param, text), env=self.env,
                         limits=self.options.limits, cache=self.options.cache)
        return SearchPoint(v, text, plan)

    def record(self, point: SearchPoint, results: Results) -> None:
        """How `point`'s run went (`ratesearch.sustained`)."""
        from workloadlang.ratesearch import Tried, sustained

        self.tried.append(Tried(value=point.value, sustained=sustained(results)))
        self.points.append((point.value, point.text, results))

    def results(self) -> SweepResults:
        """The search's results file: the points by value, the `Search`; exit code 130 when a
        run was interrupted, 0 when a value was sustained, 1 when not even the lowest was."""
        from workloadlang.ratesearch import outcome
        from workloadlang.sweepresults import SweepResults

        spec = self.spec
        found = outcome(spec.param, spec.low, spec.high, spec.precision, self.tried,
                        spec.max_runs)
        points = sorted(self.points, key=lambda p: p[0])
        code = (ExitCode.INTERRUPTED if any(p[2].exit_code == ExitCode.INTERRUPTED
                                            for p in points)
                else ExitCode.OK if found.highest is not None else ExitCode.GATE)
        return SweepResults(workload=self.wl.name, param=spec.param,
                            values=[p[1] for p in points], points=[p[2] for p in points],
                            salt=self.salt, exit_code=code, search=found)


# ---------------------------------------------------------------- running a plan


def open_engine(base_url: str, api_key: SecretStr | None = None, **declared: Any
                ) -> AbstractAsyncContextManager[EngineLink]:
    """`async with open_engine("http://127.0.0.1:8000/v1") as engine:` discovers the engine
    (its model, context limit, tokenizer, counters) and keeps the connections to it open.
    `declared`: `model`, `max_context`, `cached_zero_when_absent`, `idle_timeout_s`, `sim`
    (`run.link.open_link`). Raises `EndpointError` when the engine cannot be used."""
    from workloadlang.run.link import open_link

    return open_link(base_url, api_key, **declared)


async def run_workload(plan: Plan, engine: EngineLink, sink: Sink | None = None,
                       options: RunOptions | None = None) -> Results:
    """Run an already-made `plan` against `engine` and judge it. The entry point for running a
    plan; its signature stays:

        run_workload(plan: Plan, engine: EngineLink, sink: Sink | None = None,
                     options: RunOptions | None = None) -> Results

    - `plan`: from `make_plan` (plan it with `env={"max_context": engine.info.max_context}`).
    - `engine`: from `async with open_engine(base_url, api_key, ...)`.
    - `sink`: gets every record the moment it is kept and the run's events (`results.Sink`:
      `plan`, `calibration`, `metrics`, `gate`, `summary`, `note`); None: kept in a `ListSink`.
      The API key is in no record or event the runner makes (what the engine echoed back is
      the caller's to redact: `cli.outputs.Tee`).
    - `options`: `RunOptions` (time budget, isolation, a shard's sessions, a common start).
    Output: the `Results` (records, gates, verdicts, report numbers, exit code). Calibrate,
    execute, read the engine's counters, evaluate the gates: `measure_workload` then `judge`.
    Cancelled (Ctrl-C), it still judges what was measured (exit code 130)."""
    sink = sink if sink is not None else ListSink()
    measured = await measure_workload(plan, engine, sink, options)
    return judge(measured.plan or plan, measured, engine.engine_summary(), sink)


async def measure_workload(plan: Plan, engine: EngineLink, sink: Sink,
                           options: RunOptions | None = None,
                           shared: Shared | None = None) -> Measured:
    """Run `plan` against `engine` without judging it (a worker of a distributed run measures
    its shard, `RunOptions.sessions` with its driver's `RunOptions.calibration`, and `shared`
    links it to the rest of the run: `run.runner.Shared`; the driver judges the records of all:
    `judge`). Output: `run.runner.Measured` (records, calibration, counters, client health, why
    incomplete, whether interrupted). Cancelled, it returns what was measured."""
    from workloadlang.run.runner import measure

    return await measure(plan, engine, sink, options or RunOptions(), shared)


async def calibrate(plan: Plan, engine: EngineLink, sink: Sink) -> Calibration:
    """Calibrate as `run_workload` does first (how to size text for `engine`, the TTFT
    reference; the `calibration` event to `sink`), without running the plan: the driver of a
    distributed run does it once for all its workers (`RunOptions.calibration`)."""
    from workloadlang.run.runner import calibration

    return (await calibration(plan, engine, sink))[0]


def judge(plan: Plan, measured: Measured, engine: EngineSummary,
          sink: Sink | None = None) -> Results:
    """Output: the `Results` of a run: what was `measured`, the gates evaluated over its
    records, the verdicts, the report's numbers and the exit code; each gate and the summary
    told to `sink` (as events) when given."""
    from workloadlang.gates import evaluate_gates, evaluate_report
    from workloadlang.kinds import gate_kind
    from workloadlang.latency import performance
    from workloadlang.verdicts import client_could_move, session_verdicts, verdict_code

    records = measured.records
    # each gate's value and threshold are shown by the kind of what it compares
    gates = [g.model_copy(update={"kind": gate_kind(gp.gate)})
             for g, gp in zip(evaluate_gates(plan, records, measured.env), plan.gates)]
    client = measured.client
    if client.client_bottleneck:
        client = client.model_copy(update={"gates_client_could_move": client_could_move(
            plan, records, {**plan.params, **measured.env})})
    if measured.interrupted:
        code = ExitCode.INTERRUPTED
    elif measured.incomplete:
        code = ExitCode.INCOMPLETE
    else:
        code = verdict_code(gates)
    results = Results(
        workload=plan.workload, source=plan.source, params=plan.params, salt=plan.salt,
        plan_hash=plan.plan_hash, engine=engine, started_at=measured.started_at,
        elapsed_s=measured.elapsed_s, hit_ratio=plan.hit_ratio,
        calibration=measured.calibration, metrics=measured.metrics, client=client,
        incomplete=measured.incomplete, exit_code=code, gates=gates,
        verdicts=session_verdicts(plan, gates),
        report=evaluate_report(plan, records, measured.env),
        report_format={item.name: item.fmt for item in plan.report},
        impossible=sum(1 for r in records if r.impossible),
        cache_theory=cache_theory(plan, records),
        performance=performance(records, plan.slo), records=records)
    if sink is not None:
        for g in results.gates:
            sink.event("gate", g.model_dump(mode="json"))
        sink.event("summary", {"exit_code": results.exit_code, "incomplete": results.incomplete,
                               "verdicts": results.verdicts, "report": results.report,
                               "impossible": results.impossible})
    return results
