"""The rate search: the highest value of a param (an arrival or turn rate) at which a run still
meets its SLOs.

Input: the range to search (`LOW..HIGH`), how fine (`precision`, a share of the value) and the
points tried so far, each with whether its run sustained the load (`sustained`: its goodput's
attainment reached the SLOs' and the run was complete). Output: the next value to try
(`next_value`, None when the search is done) and, at the end, `Search`: the highest value
sustained below the lowest one that was not (so one lucky point above a failure does not
count), with every point tried. `spec_of` checks a search asked for against the workload
(`SearchSpec`). Pure: no run, no clock; `api.RateSearch` plans the points and `wl run --search`
runs them (docs/cli.md "Rate search").

The steps: try LOW (not sustained: nothing is, the search ends); double while sustained, up
to HIGH (sustained at HIGH: the range's top, the search ends); then halve the interval between
the highest value sustained and the lowest not, until it is within `precision` of the value
sustained (for an `int` param, until they are 1 apart), or `max_runs` runs were made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from workloadlang import ir
from workloadlang.results import Results


class SearchError(ValueError):
    """A `--search` that cannot be run; the message says why (a usage error)."""


class Tried(BaseModel):
    """One point of the search: the param's value and whether its run sustained the load."""

    model_config = ConfigDict(frozen=True)
    value: float
    sustained: bool


class Search(BaseModel):
    """A rate search's outcome: the param, its range and precision, the points in the order
    they were tried, the highest value sustained (None: not even LOW) and why it stopped."""

    model_config = ConfigDict(frozen=True)
    param: str
    low: float
    high: float
    precision: float
    tried: list[Tried]
    highest: float | None
    stopped: str


def parse_range(text: str) -> tuple[str, float, float]:
    """`NAME=LOW..HIGH` -> (name, low, high). Raises `SearchError` for another shape, a bound
    that is no number, a bound of 0 or less, or LOW not under HIGH."""
    name, eq, rng = text.partition("=")
    low_s, dots, high_s = rng.partition("..")
    if not eq or not dots or not name.strip():
        raise SearchError(f"--search {text}: write NAME=LOW..HIGH, like rate=1..64")
    try:
        low, high = float(low_s), float(high_s)
    except ValueError:
        raise SearchError(f"--search {text}: LOW and HIGH must be numbers") from None
    if not 0 < low < high or high == float("inf"):
        raise SearchError(f"--search {text}: LOW must be above 0 and under HIGH (a rate of 0 "
                          "sends nothing)")
    return name.strip().replace("-", "_"), low, high


@dataclass(frozen=True)
class SearchSpec:
    """A rate search asked for, checked against its workload: the param searched, its range
    (`low` above 0, under `high`), whether it takes whole numbers, how fine (`precision`, a
    share of the value) and at most how many runs."""

    param: str
    low: float
    high: float
    whole: bool = False
    precision: float = 0.05
    max_runs: int = 12

    def text(self, value: float) -> str:
        """A value as the command line would give it (`12`, `10.5`)."""
        return str(int(value)) if self.whole else f"{value:g}"


def spec_of(wl: ir.Workload, overrides: Mapping[str, str], text: str, precision: float = 0.05,
            max_runs: int = 12) -> SearchSpec:
    """`NAME=LOW..HIGH` (`--search`) for `wl` with the params `overrides` sets. Output: the
    `SearchSpec`. Raises `SearchError`: the range's shape (`parse_range`), no number param of
    that name, the param also set, a workload with no SLOs (no rate is judged sustained)."""
    name, low, high = parse_range(text)
    params = {p.name: p for p in wl.params}
    p = params.get(name)
    if p is None or p.is_list or p.type not in ("int", "float"):
        known = ", ".join(n for n, q in params.items() if q.type in ("int", "float")) or "none"
        raise SearchError(f"--search {name}: not a number param of this workload (its number "
                          f"params: {known})")
    if name in overrides:
        raise SearchError(f"--search {name}: the param is also set on the command line")
    if not wl.slo:
        raise SearchError(f"--search: workload `{wl.name}` declares no SLOs, so no rate can be "
                          "judged sustained: add `slo { ttft = 2s, tpot = 50ms }`")
    return SearchSpec(name, low, high, p.type == "int", precision, max_runs)


def sustained(res: Results) -> bool:
    """Output: whether a run sustained its load: complete, and its goodput's attainment at
    least the SLOs' (`Performance.goodput.sustained`)."""
    perf = res.performance
    good = None if perf is None or perf.goodput is None else perf.goodput.sustained
    return bool(good) and res.incomplete is None


def bracket(tried: Sequence[Tried]) -> tuple[float | None, float | None]:
    """Output: (the highest value sustained below the lowest not sustained, that lowest value);
    None where there is none."""
    failed = min((t.value for t in tried if not t.sustained), default=None)
    passed = [t.value for t in tried if t.sustained and (failed is None or t.value < failed)]
    return max(passed, default=None), failed


def next_value(tried: Sequence[Tried], low: float, high: float, precision: float = 0.05,
               whole: bool = False, max_runs: int = 12) -> float | None:
    """Output: the next value to run (see the module), None when the search is done."""
    if not tried:
        return low
    if len(tried) >= max_runs:
        return None
    best, failed = bracket(tried)
    if best is None:
        return None  # not even LOW
    if failed is None:
        return None if best >= high else _whole(min(high, 2 * best), whole)
    if failed - best <= (max(1.0, precision * best) if whole else precision * best):
        return None
    mid = _whole((best + failed) / 2, whole)
    return None if mid in (best, failed) else mid


def _whole(v: float, whole: bool) -> float:
    return float(round(v)) if whole else round(v, 6)


def outcome(param: str, low: float, high: float, precision: float,
            tried: Sequence[Tried], max_runs: int) -> Search:
    """Output: the `Search` of the points tried."""
    best, failed = bracket(tried)
    if best is None:
        why = f"{param}={low:g} (the range's low end) was not sustained"
    elif failed is None:
        why = f"{param}={high:g} (the range's top) was sustained"
    elif len(tried) >= max_runs and failed - best > precision * best:
        why = f"{max_runs} runs made, the highest sustained within {failed / best - 1:.0%}"
    else:
        why = f"sustained at {best:g}, not at {failed:g}"
    return Search(param=param, low=low, high=high, precision=precision, tried=list(tried),
                  highest=best, stopped=why)
