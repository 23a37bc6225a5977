"""`wl run --search NAME=LOW..HIGH`: the highest value of a param (an arrival or turn rate)
whose runs meet the workload's SLOs.

Input: an `api.RateSearch` (the search checked before the engine was reached: `common.prepare`,
exit 2 for no such param, not a number, set twice, combined with `--sweep`, no `slo { }`); how
to run one plan (`run_one`). Output: `run_search` runs the point `RateSearch.next_point` plans,
one at a time, says how each went, and gives the search's `SweepResults` with the `Search`
(points in the order of their values). The exit code of a search is 0 when a value was
sustained, 1 when not even LOW was, 130 when interrupted (docs/cli.md "Rate search").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from workloadlang import api
from workloadlang.cli.common import show_diags
from workloadlang.diagnostics import WorkloadError
from workloadlang.ratesearch import sustained
from workloadlang.results import ExitCode, Results

RunOne = Callable[[Any], Awaitable[Results]]


async def run_search(search: api.RateSearch, source: api.Source, run_one: RunOne,
                     mark: Callable[[str, str, int], None]) -> Any:
    """Run the search (`run_one(plan)` runs a plan; `mark(param, value, index)` tells where a
    point's records start). Output: its `SweepResults`. A point whose plan cannot be made:
    its diagnostics, exit 2."""
    param, index = search.spec.param, 0
    while True:
        try:
            point = search.next_point()
        except WorkloadError as e:
            show_diags(e.diagnostics, source, "text")
            raise SystemExit(ExitCode.USAGE) from None
        if point is None:
            break
        mark(param, point.text, index)
        index += 1
        print(f"── search {param}={point.text} (run {index}) ──")
        res = await run_one(point.plan)
        search.record(point, res)
        print(point_line(param, point.text, res))
        if res.exit_code == ExitCode.INTERRUPTED:
            break
    return search.results()


def point_line(param: str, text: str, res: Results) -> str:
    """`rate=8: sustained (goodput 7.9 req/s, 99.0% met the SLOs)` after each point."""
    g = None if res.performance is None else res.performance.goodput
    how = "" if g is None or g.attainment is None else (
        f" (goodput {g.rate or 0:.3g} req/s, {g.attainment:.1%} of {g.judged:,} met the SLOs"
        + (f"; incomplete: {res.incomplete}" if res.incomplete else "") + ")")
    return f"{param}={text}: {'sustained' if sustained(res) else 'NOT sustained'}{how}"
