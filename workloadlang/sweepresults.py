"""Sweeps: a workload run once per value of one param, into one results file.

Input: each point's `Results` (the points and their salts: `plan.sweeppoints`). Output: the sweep
results file (`SweepResults`, schema `workloadlang.sweep/1`: one `Results` per point, in
order, and the worst exit code of them), reading either kind of results file (`read_any`),
the numbers of each point side by side (`curves`, `table`). `wl report` draws the curves, `wl compare` compares two sweeps point by
point (docs/cli.md "Sweeps").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError
from tabulate import tabulate

from workloadlang.headline import Kind, fmt_value, headline
from workloadlang.ratesearch import Search
from workloadlang.results import Results, ResultsFileError, read_results, results_of

SCHEMA = "workloadlang.sweep/1"


class SweepResults(BaseModel):
    """The results file of a sweep: the param, its values (as given on the command line) and
    each point's results, in order; `exit_code` is the worst of theirs."""

    schema_: str = SCHEMA
    workload: str
    param: str
    values: list[str]
    salt: str | None = None  # the sweep's; each point's is `point_salt` of it
    exit_code: int
    points: list[Results]
    # a rate search's outcome (`wl run --search`); its points are then in the order of the
    # values, `search.tried` in the order they were run
    search: Search | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2).replace('"schema_"', '"schema"', 1)


# the exit codes a point of a sweep can end with, best first (docs/cli.md)
_ORDER = (0, 6, 1, 3, 4, 5, 130)


def worst_exit(codes: list[int]) -> int:
    """The exit code of a sweep: its worst point's (0 ok < 6 unverified < 1 a gate failed < 3
    endpoint < 4 incomplete < 130 interrupted)."""
    rank = {c: i for i, c in enumerate(_ORDER)}
    return max(codes, key=lambda c: rank.get(c, len(_ORDER)), default=0)


def read_any(path: str | Path) -> Results | SweepResults:
    """A results file of one run or of a sweep. Raises `ResultsFileError` with a one-line
    reason (`read_results`' for anything that is no sweep's file)."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        data = None
    # the file's JSON, read by key to tell a sweep's file from a run's before either is validated
    if not (isinstance(data, dict) and data.get("schema") == SCHEMA):
        return read_results(path)
    try:
        return SweepResults.model_validate(
            {**{k: v for k, v in data.items() if k != "schema"}, "points": [
                results_of(p, str(path)) for p in data.get("points", [])]})
    except ValidationError as e:
        raise ResultsFileError(f"{path} is not a valid sweep results file "
                               f"({e.error_count()} problem(s))") from None


def curves(s: SweepResults) -> dict[str, tuple[Kind, list[Any]]]:
    """Each headline number of the points (`headline.headline`: report items, hit rate, reuse,
    TTFT, ...) as `name -> (kind, one value per point)`, in the first point's order."""
    heads = [headline(p) for p in s.points]
    names = list(dict.fromkeys(n for h in heads for n in h))
    return {n: (next(h[n][0] for h in heads if n in h), [h.get(n, (None, None))[1]
                                                          for h in heads]) for n in names}


SHOWN = ("warm hits", "warm misses", "warm mean reuse", "warm median ttft", "cold median ttft",
         "errors", "ttft p99", "itl p99", "goodput", "slo attainment", "hit rate (measured)")


def search_line(s: SweepResults) -> str | None:
    """A rate search's outcome in a line (None for a sweep)."""
    if s.search is None:
        return None
    found = "none" if s.search.highest is None else f"{s.search.highest:g}"
    return (f"highest {s.param} sustained: {found} ({s.search.stopped}; {len(s.search.tried)} "
            f"runs, precision {s.search.precision:.0%})")


def table(s: SweepResults) -> str:
    """The points side by side: the swept value, the exit code, the gates failed, then the
    report items and a few figures of each run."""
    cols = curves(s)
    names = [n for n in cols if n not in dict(curves_of_run()) or n in SHOWN]
    rows = []
    for i, (value, res) in enumerate(zip(s.values, s.points)):
        failed = [g.name for g in res.gates if g.status == "fail" and g.severity == "fail"]
        rows.append([value, res.exit_code, ", ".join(failed) or "–",
                     *(fmt_value(cols[n][0], cols[n][1][i]) for n in names)])
    return tabulate(rows, headers=[s.param, "exit", "gates failed", *names], tablefmt="simple",
                    disable_numparse=True)


def curves_of_run() -> list[tuple[str, str]]:
    """The run figures `headline.headline` adds after the report items (name, kind)."""
    return [(n, "") for n in ("requests", "skipped", "errors", "warm hits", "warm misses",
                              "warm unknown", "warm mean reuse", "warm median ttft",
                              "cold median ttft", "prompt tokens", "cached tokens",
                              "engine hit ratio", "elapsed", *PERFORMANCE)]


PERFORMANCE = ("request rate", "output tokens/s", "ttft p50", "ttft p99", "itl p50", "itl p99",
               "tpot p50", "tpot p99", "e2e p50", "e2e p99", "hit rate (measured)", "goodput",
               "slo attainment")
"""The latency, throughput and goodput figures `headline.performance` adds."""
