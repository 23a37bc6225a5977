"""Sweeps, planned: the param a workload is run over and its values, and each point's salt.

Input: a checked `ir.Workload`, the params set on the command line and `--sweep NAME=A,B,...`
(or the file's `sweep [...]` clause of one param). Output: the param and its values
(`points`, at most `MAX_SWEEP_POINTS`), each point's salt (`salts`: a value written twice is
two independent points; the sweep's salt back from a point's, `sweep_salt`), what `wl plan`
keeps of a point it only lists (`row_only`). The points of a sweep are planned into one
`limits.Budget`: together they are within the planner's limits. The runs and their results
file are `workloadlang.sweepresults` (docs/cli.md "Sweeps").
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from workloadlang import ir
from workloadlang.bounds import MAX_SWEEP_POINTS
from workloadlang.check import sweep_text
from workloadlang.plan.model import Plan


class SweepError(ValueError):
    """A `--sweep` that cannot be run; the message says why (a usage error)."""


def points(wl: ir.Workload, overrides: Mapping[str, str], flag: str | None
           ) -> tuple[str, list[str]] | None:
    """The param to sweep and its values: `--sweep NAME=A,B` (`flag`), else the `sweep [...]`
    of a param not set on the command line; None when there is no sweep. Raises `SweepError`
    for a flag that names no param, a param also set, or no value."""
    if flag is None:
        for p in wl.params:
            if p.sweep is not None and p.name not in overrides:
                assert isinstance(p.sweep, ir.ListExpr)  # checked (WL233)
                return p.name, [sweep_text(v) or "" for v in p.sweep.items]
        return None
    name, eq, values = flag.partition("=")
    name = name.strip().replace("-", "_")
    known = {p.name for p in wl.params}
    if not eq or name not in known:
        raise SweepError(f"--sweep {flag}: write NAME=V1,V2,... with a param of this workload "
                         f"({', '.join(sorted(known)) or 'it has none'})")
    if name in overrides:
        raise SweepError(f"--sweep {name}: the param is also set on the command line")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not items:
        raise SweepError(f"--sweep {flag}: no value to sweep")
    if len(items) > MAX_SWEEP_POINTS:
        raise SweepError(f"--sweep {name}: {len(items):,} values, more than {MAX_SWEEP_POINTS} "
                         "points (each point is a run: sweep fewer values, or split the sweep "
                         "in runs)")
    return name, items


def point_salt(salt: str, name: str, value: str, repeat: int = 0) -> str:
    """The salt of a sweep's point: the sweep's salt and the point (`S/sessions=4`; the k-th
    repeat of a value written again, `S/sessions=4#k`). Each point sends its own text, so an
    engine's cache carries nothing from one point into the next (the same text at every point
    would be served from what the points before it left); `--salt S/sessions=4 --sessions 4`
    replays that point alone."""
    return f"{salt}/{name}={value}" + (f"#{repeat}" if repeat else "")


def salts(salt: str, name: str, values: list[str]) -> list[str]:
    """Each point's salt (`point_salt`): a value written twice (`sweep [1, 1]`) is two points,
    each with its own text."""
    seen: dict[str, int] = {}
    out = []
    for v in values:
        out.append(point_salt(salt, name, v, seen.get(v, 0)))
        seen[v] = seen.get(v, 0) + 1
    return out


def sweep_salt(point: str, name: str, value: str) -> str:
    """The sweep's salt back from a point's (`point_salt`)."""
    found = re.search(rf"/{re.escape(name)}={re.escape(value)}(#\d+)?$", point)
    return point[:found.start()] if found else point


def row_only(plan: Plan) -> Plan:
    """A point's plan as `wl plan` lists it, in a row (its totals, concurrency, hash and salt),
    without its messages, requests and texts: a sweep's rows cost no more than its first plan."""
    return plan.model_copy(update={"messages": (), "requests": (), "texts": ()})
