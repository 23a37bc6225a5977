"""`wl run --search NAME=LOW..HIGH`: the highest value of a param (an arrival or turn rate)
whose runs meet the workload's SLOs.

Input: parsed args and the param flags; an open engine; how to run one plan (`run_one`).
Output: `prepare` checks the search before the engine is reached (`UsageError`, exit 2: no
such param, not a number, set twice, combined with `--sweep`, no `slo { }`); `run_search`
runs a point per value `ratesearch.next_value` asks for, each planned with its own salt
(`plan.sweeppoints.point_salt`), and gives the `SweepResults` with the `Search` (points in the
order of their values). The exit code of a search is 0 when a value was sustained, 1 when not
even LOW was, 130 when interrupted (docs/cli.md "Rate search").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from workloadlang import api
from workloadlang.cli.common import (UsageError, cache_model, load, param_overrides,
                                     plan_limits, show_diags)
from workloadlang.diagnostics import WorkloadError
from workloadlang.results import ExitCode, Results
from workloadlang.ratesearch import (SearchError, Tried, next_value, outcome, parse_range,
                                 sustained)


@dataclass
class Spec:
    """A search, checked: the workload, the params set, the param searched and its range."""

    source: api.Source
    wl: Any
    overrides: dict[str, str]
    param: str
    low: float
    high: float
    whole: bool


def prepare(args: Any, extra: list[str]) -> Spec:
    """Output: the search `--search` asks for, checked before anything is sent. Raises
    `UsageError` (or exits 2 with the workload's diagnostics)."""
    if args.sweep:
        raise UsageError("--search and --sweep: run one or the other")
    source = load(args.workload, "text")
    try:
        wl = api.parse_checked(source)
    except WorkloadError as e:
        show_diags(e.diagnostics, source, "text")
        raise SystemExit(ExitCode.USAGE) from None
    overrides = param_overrides(wl, extra, args.param or [])
    try:
        name, low, high = parse_range(args.search)
    except SearchError as e:
        raise UsageError(str(e)) from None
    params = {p.name: p for p in wl.params}
    p = params.get(name)
    if p is None or p.is_list or p.type not in ("int", "float"):
        known = ", ".join(n for n, q in params.items() if q.type in ("int", "float")) or "none"
        raise UsageError(f"--search {name}: not a number param of this workload (its number "
                         f"params: {known})")
    if name in overrides:
        raise UsageError(f"--search {name}: the param is also set on the command line")
    if not wl.slo:
        raise UsageError(f"--search: workload `{wl.name}` declares no SLOs, so no rate can be "
                         "judged sustained: add `slo { ttft = 2s, tpot = 50ms }`")
    return Spec(source, wl, overrides, name, low, high, p.type == "int")


def text_of(v: float, whole: bool) -> str:
    """A value as the command line would give it (`12`, `10.5`)."""
    return str(int(v)) if whole else f"{v:g}"


RunOne = Callable[[Any], Awaitable[Results]]


async def run_search(spec: Spec, args: Any, env: dict[str, Any], run_one: RunOne,
                     mark: Callable[[str, str, int], None]) -> Any:
    """Run the search (`run_one(plan)` runs a plan; `mark(param, value, index)` tells where a
    point's records start). Output: its `SweepResults`."""
    from workloadlang import sweepresults
    from workloadlang.plan.sweeppoints import point_salt

    salt = args.salt or api.fresh_salt()
    tried: list[Tried] = []
    points: list[tuple[float, str, Results]] = []
    while (v := next_value(tried, spec.low, spec.high, args.search_precision, spec.whole,
                           args.search_runs)) is not None:
        text = text_of(v, spec.whole)
        try:
            plan = api.make_plan(spec.wl, spec.source, {**spec.overrides, spec.param: text},
                                 salt=point_salt(salt, spec.param, text), env=env,
                                 limits=plan_limits(args), cache=cache_model(args))
        except WorkloadError as e:
            show_diags(e.diagnostics, spec.source, "text")
            raise SystemExit(ExitCode.USAGE) from None
        mark(spec.param, text, len(tried))
        print(f"── search {spec.param}={text} (run {len(tried) + 1}) ──")
        res = await run_one(plan)
        tried.append(Tried(value=v, sustained=sustained(res)))
        points.append((v, text, res))
        print(point_line(spec.param, text, res))
        if res.exit_code == ExitCode.INTERRUPTED:
            break
    found = outcome(spec.param, spec.low, spec.high, args.search_precision, tried,
                    args.search_runs)
    points.sort(key=lambda p: p[0])
    code = (ExitCode.INTERRUPTED if any(p[2].exit_code == ExitCode.INTERRUPTED for p in points)
            else ExitCode.OK if found.highest is not None else ExitCode.GATE)
    return sweepresults.SweepResults(workload=spec.wl.name, param=spec.param,
                              values=[p[1] for p in points], points=[p[2] for p in points],
                              salt=salt, exit_code=code, search=found)


def point_line(param: str, text: str, res: Results) -> str:
    """`rate=8: sustained (goodput 7.9 req/s, 99.0% met the SLOs)` after each point."""
    g = None if res.performance is None else res.performance.goodput
    how = "" if g is None or g.attainment is None else (
        f" (goodput {g.rate or 0:.3g} req/s, {g.attainment:.1%} of {g.judged:,} met the SLOs"
        + (f"; incomplete: {res.incomplete}" if res.incomplete else "") + ")")
    return f"{param}={text}: {'sustained' if sustained(res) else 'NOT sustained'}{how}"
