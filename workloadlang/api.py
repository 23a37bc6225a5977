"""The front door: chain the stages, and expose each intermediate result.

    source = load("agent-sim")                 # a bundled name or a path
    wl = parse_checked(source)                  # ir.Workload, or WorkloadError
    plan = make_plan(wl, source, {"sessions": "2"}, salt="s1", env={"max_context": 32768})
    async with open_engine("http://127.0.0.1:8000/v1") as engine:
        plan = make_plan(wl, source, {}, env={"max_context": engine.info.max_context})
        results = await run_workload(plan, engine, sink, RunOptions(time_budget_s=60))

Input: workload text and its name; an engine's URL. Output: `ir.Workload`, `Plan`, `Results`.
Errors are `WorkloadError` carrying `Diagnostic`s (`EndpointError` for an engine that cannot be
used); nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncContextManager, Collection, Mapping

from pydantic import SecretStr

from workloadlang import bounds, ir
from workloadlang.check import check
from workloadlang.diagnostics import Diagnostic, WorkloadError
from workloadlang.evaluate import resolve_params
from workloadlang.parse import parse
from workloadlang.plan.model import Plan
from workloadlang.plan.assemble import build_plan
from workloadlang.plan.draws import fresh_salt
from workloadlang.plan.limits import Budget, Limits
from workloadlang.plan.model import CacheModel
from workloadlang.resources import bundled_workload_path, bundled_workloads
from workloadlang.results import ExitCode, ListSink, Results, Sink
from workloadlang.run.errors import EndpointError  # noqa: F401 (raised by open_engine)
from workloadlang.run.runoptions import RunOptions
from workloadlang.theory import cache_theory

if TYPE_CHECKING:
    from workloadlang.run.link import EngineLink
    from workloadlang.run.calibrate import Calibration
    from workloadlang.run.runner import Measured, Shared


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
    not a budget of its own (a sweep's points share one: `cli.common.plan_points`)."""
    env = {"max_context": None, **(env or {})}
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


def load_traces(wl: ir.Workload, env: Mapping[str, Any], limits: Limits) -> dict[str, Any]:
    """The trace of each trace session, read here (the planner reads no file)."""
    if not any(getattr(s, "trace", None) is not None for s in wl.sessions):
        return {}
    from workloadlang import tracefile

    return tracefile.load_for(wl, env, limits)


def warnings(wl: ir.Workload, flags: Collection[str] = ()) -> list[Diagnostic]:
    return [d for d in check(wl, flags) if d.severity != "error"]


# ---------------------------------------------------------------- running a plan


def open_engine(base_url: str, api_key: SecretStr | None = None, **declared: Any
                ) -> AsyncContextManager["EngineLink"]:
    """`async with open_engine("http://127.0.0.1:8000/v1") as engine:` discovers the engine
    (its model, context limit, tokenizer, counters) and keeps the connections to it open.
    `declared`: `model`, `max_context`, `cached_zero_when_absent`, `idle_timeout_s`, `sim`
    (`run.link.open_link`). Raises `EndpointError` when the engine cannot be used."""
    from workloadlang.run.link import open_link

    return open_link(base_url, api_key, **declared)


async def run_workload(plan: Plan, engine: "EngineLink", sink: Sink | None = None,
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
    return judge(plan, measured, engine.engine_fields(), sink)


async def measure_workload(plan: Plan, engine: "EngineLink", sink: Sink,
                           options: RunOptions | None = None,
                           shared: "Shared | None" = None) -> "Measured":
    """Run `plan` against `engine` without judging it (a worker of a distributed run measures
    its shard, `RunOptions.sessions` with its driver's `RunOptions.calibration`, and `shared`
    links it to the rest of the run: `run.runner.Shared`; the driver judges the records of all:
    `judge`). Output: `run.runner.Measured` (records, calibration, counters, client health, why
    incomplete, whether interrupted). Cancelled, it returns what was measured."""
    from workloadlang.run.runner import measure

    return await measure(plan, engine, sink, options or RunOptions(), shared)


async def calibrate(plan: Plan, engine: "EngineLink", sink: Sink) -> "Calibration":
    """Calibrate as `run_workload` does first (how to size text for `engine`, the TTFT
    reference; the `calibration` event to `sink`), without running the plan: the driver of a
    distributed run does it once for all its workers (`RunOptions.calibration`)."""
    from workloadlang.run.runner import calibration

    return (await calibration(plan, engine, sink))[0]


def judge(plan: Plan, measured: "Measured", engine: dict[str, Any],
          sink: Sink | None = None) -> Results:
    """Output: the `Results` of a run: what was `measured`, the gates evaluated over its
    records, the verdicts, the report's numbers and the exit code; each gate and the summary
    told to `sink` (as events) when given."""
    from workloadlang.gates import evaluate_gates, evaluate_report, failed, session_verdicts
    from workloadlang.kinds import gate_kind
    from workloadlang.latency import performance

    records = measured.records
    # each gate's value and threshold are shown by the kind of what it compares
    gates = [g.model_copy(update={"kind": gate_kind(gp.gate)})
             for g, gp in zip(evaluate_gates(plan, records, measured.env), plan.gates)]
    if measured.interrupted:
        code = ExitCode.INTERRUPTED
    elif measured.incomplete:
        code = ExitCode.INCOMPLETE
    else:
        code = ExitCode.GATE if failed(gates) else ExitCode.OK
    results = Results(
        workload=plan.workload, source=plan.source, params=plan.params, salt=plan.salt,
        plan_hash=plan.plan_hash, engine=engine, started_at=measured.started_at,
        elapsed_s=measured.elapsed_s, hit_ratio=plan.hit_ratio,
        calibration=measured.calibration, metrics=measured.metrics, client=measured.client,
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
