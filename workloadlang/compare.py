"""`wl compare A B`: two results files of the same plan, side by side, with gate verdicts.

Input: two `--output` JSON files (the `Results` model of `workloadlang.results`).
Output: a table of every headline number (each report item, per group as `name[group]`, plus
request, error, hit/miss, reuse, TTFT, token and engine-counter figures) with signed deltas and %
change, then one verdict per gate and per session of a per-session gate: `fixed`, `regressed`,
`unchanged pass`, `unchanged fail` (or `only in A` / `only in B`; `not applicable in A` / `in B` /
`in both` where the gate's `when` condition was false, so nothing was judged there).

Exit codes: 0 when nothing regressed; 1 when B fails a fail-severity gate (or a session of one)
that A passed (warn gates are reported but, as in `wl run`, never fail); 2 when a file is
unreadable or not a results file, or when the plan hashes differ: different workload, params or
salt make the numbers incomparable (`wl run --salt` replays a run's plan exactly).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any

from tabulate import tabulate

from workloadlang.console.format import fmt_kind, fmt_number
from workloadlang.headline import Kind, fmt_value, headline, numeric  # noqa: F401
from workloadlang.results import (
    ExitCode,
    GateResult,
    Results,
    ResultsFileError,
    ScopeResult,
    read_results,
)


class NotComparable(Exception):
    """A refusal, with the one-line reason shown to the user."""


@dataclass(frozen=True)
class CompareRequest:
    """`wl compare A B`: the paths of the two results files, A the baseline."""

    a: str
    b: str


# ---------------------------------------------------------------- loading


def load_results(path: str) -> Results:
    """Input: a path. Output: its `Results` (`results.read_results`). Raises `NotComparable` with
    a one-line reason when it cannot be read or is not a results file."""
    try:
        return read_results(path)
    except ResultsFileError as e:
        raise NotComparable(str(e)) from None


def why_not_comparable(a: Results, b: Results) -> str | None:
    """Input: two results. Output: None when they ran the same plan (equal `plan_hash`), else
    the reason, naming what differs (workload, params, salt)."""
    if a.plan_hash == b.plan_hash:
        return None
    diffs = []
    if a.workload != b.workload:
        diffs.append(f"workload {a.workload} vs {b.workload}")
    changed = sorted(k for k in a.params.keys() | b.params.keys() if a.params.get(k) != b.params.get(k))
    if changed:
        diffs.append("params " + ", ".join(
            f"{k}={a.params.get(k, '–')} vs {b.params.get(k, '–')}" for k in changed[:4])
            + (" …" if len(changed) > 4 else ""))
    if a.salt != b.salt:
        diffs.append(f"salt {a.salt} vs {b.salt}")
    what = "; ".join(diffs) or "the workload source differs"
    return (f"not comparable: A and B ran different plans (plan {a.plan_hash} vs {b.plan_hash}: "
            f"{what}); different workload, params or salt make different requests — rerun with "
            f"`wl run --salt {a.salt}` and A's params to replay A's plan exactly")


# ---------------------------------------------------------------- headline numbers




def fmt_delta(kind: Kind, a: Any, b: Any) -> tuple[str, str]:
    """Input: a kind and both values. Output: (signed delta, signed % change of A); a zero
    delta prints as `0` and `0%`; `–` when a side is unknown or A is 0 for the % change."""
    if not (numeric(a) and numeric(b)):
        if a is None or b is None:
            return "–", "–"
        return ("same", "–") if a == b else ("changed", "–")
    d = b - a
    if d == 0:
        return "0", "0%"
    pct = f"{100 * d / abs(a):+.1f}%" if a != 0 else "–"
    if kind == "ratio":
        return f"{100 * d:+.1f}pp", pct
    if kind == "seconds":
        return (f"{d:+.3f}s" if abs(d) < 100 else f"{d:+.1f}s"), pct
    return ("-" if d < 0 else "+") + fmt_number(abs(round(d) if kind == "count" else d)), pct


def metric_rows(a: Results, b: Results) -> list[list[str]]:
    """Output: one row per headline number of either side: name, A, B, delta, % change."""
    ha, hb = headline(a), headline(b)
    rows = []
    for name in list(ha) + [k for k in hb if k not in ha]:
        kind = (ha.get(name) or hb[name])[0]
        va, vb = ha.get(name, (kind, None))[1], hb.get(name, (kind, None))[1]
        rows.append([name, fmt_value(kind, va), fmt_value(kind, vb), *fmt_delta(kind, va, vb)])
    return rows


# ---------------------------------------------------------------- gates


NOT_APPLICABLE = "n/a"


def scope_status(r: ScopeResult | None) -> str | None:
    """Input: a `ScopeResult` or None. Output: its status, `n/a` for a scope that passed only
    because the gate's `when` condition was false there, None when absent."""
    if r is None:
        return None
    return NOT_APPLICABLE if r.not_applicable and r.status == "pass" else r.status


def gate_status(g: GateResult | None) -> str | None:
    """Input: a `GateResult` or None. Output: its status, `n/a` when its `when` condition was
    false in every scope it judged (it passed without judging anything), None when absent."""
    if g is None:
        return None
    statuses = {scope_status(r) for r in g.results}
    return NOT_APPLICABLE if statuses == {NOT_APPLICABLE} else g.status


@dataclass(frozen=True)
class GateChange:
    """One gate (scope `overall`/`each session`) or one session of a per-session gate."""

    gate: str
    scope: str
    severity: str
    a: str | None  # status: pass / fail / unknown / n/a, None when the gate is absent
    b: str | None
    a_value: Any = None
    b_value: Any = None
    kind: str | None = None  # of the values (`GateResult.kind`): how they are shown

    @property
    def change(self) -> str:
        """Output: fixed, regressed, unchanged pass, unchanged fail, only in A, only in B, or for a
        session where the gate's `when` was false on a side: `not applicable in A` / `in B` /
        `in both` (nothing was judged there, so it is neither fixed nor regressed)."""
        if self.a is None or self.b is None:
            return "only in B" if self.a is None else "only in A"
        if NOT_APPLICABLE in (self.a, self.b):
            if self.a == self.b:
                return "not applicable in both"
            return "not applicable in " + ("A" if self.a == NOT_APPLICABLE else "B")
        was, now = self.a == "pass", self.b == "pass"
        if was != now:
            return "fixed" if now else "regressed"
        return "unchanged pass" if now else "unchanged fail"

    @property
    def fails_compare(self) -> bool:
        """Output: True for a regression of a fail-severity gate (warn gates never fail)."""
        return self.change == "regressed" and self.severity == "fail"


def gate_changes(a: Results, b: Results) -> list[GateChange]:
    """Output: per gate (A's order, then B's new ones) its overall change, followed for a
    per-session gate by one change per session (sessions of either side)."""
    ga, gb = {g.name: g for g in a.gates}, {g.name: g for g in b.gates}
    out = []
    for name in list(ga) + [n for n in gb if n not in ga]:
        x, y = ga.get(name), gb.get(name)
        g = x if x is not None else gb[name]  # a name of B's when not of A's
        sa = {r.scope: r for r in x.results} if x is not None else {}
        sb = {r.scope: r for r in y.results} if y is not None else {}
        head: dict[str, Any] = dict(gate=name, severity=g.severity, a=gate_status(x),
                                    b=gate_status(y), kind=g.kind)
        if g.scope != "each session":
            out.append(GateChange(scope=g.scope, a_value=value_of(sa.get("overall")),
                                  b_value=value_of(sb.get("overall")), **head))
            continue
        out.append(GateChange(scope=g.scope, **head))
        for scope in list(sa) + [s for s in sb if s not in sa]:
            ra, rb = sa.get(scope), sb.get(scope)
            out.append(GateChange(gate=name, scope=scope, severity=g.severity,
                                  a=scope_status(ra), b=scope_status(rb),
                                  a_value=value_of(ra), b_value=value_of(rb), kind=g.kind))
    return out


def value_of(r: ScopeResult | None) -> Any:
    return None if r is None else r.value


def status_cell(status: str | None, value: Any, kind: str | None = None) -> str:
    """A gate's status on one side, with its value shown by the gate's kind: `pass (50ms)`."""
    if status is None:
        return "–"
    return status if value is None else f"{status} ({fmt_kind(value, kind or 'number')})"


def gate_table_rows(changes: list[GateChange]) -> list[list[str]]:
    rows = []
    for c in changes:
        sev = "" if c.severity == "fail" else " (warn)"
        rows.append([c.gate, c.scope,
                     status_cell(c.a, c.a_value, c.kind), status_cell(c.b, c.b_value, c.kind),
                     c.change.upper() if c.fails_compare else c.change + sev])
    return rows


# ---------------------------------------------------------------- the command


def describe(tag: str, path: str, r: Results) -> str:
    what = " ".join(x for x in (r.engine.engine, r.engine.model) if x) or "engine ?"
    line = f"{tag}: {path} · {what} · {r.started_at} · {len(r.records)} records in {r.elapsed_s:.1f}s"
    if r.incomplete:
        line += f" · INCOMPLETE ({r.incomplete}): its numbers cover part of the plan"
    return line


def compare_text(a: Results, b: Results, path_a: str, path_b: str) -> tuple[str, int]:
    """Input: two comparable results and their paths. Output: the report text and exit code."""
    changes = gate_changes(a, b)
    counts: dict[str, int] = {}
    for c in changes:
        if c.scope != "each session":  # a per-session gate counts by its sessions
            counts[c.change] = counts.get(c.change, 0) + 1
    failing = [c for c in changes if c.fails_compare]
    parts = [describe("A", path_a, a), describe("B", path_b, b),
             f"workload {a.workload} · plan {a.plan_hash} · salt {a.salt} (the same requests)", "",
             "── numbers (delta = B − A, % of A) ──",
             tabulate(metric_rows(a, b), headers=["metric", "A", "B", "delta", "change"],
                      tablefmt="simple", disable_numparse=True, colalign=("left", "right", "right",
                                                                          "right", "right"))]
    if changes:
        parts += ["", "── gates ──", tabulate(gate_table_rows(changes), headers=[
            "gate", "scope", "A", "B", "verdict"], tablefmt="simple", disable_numparse=True)]
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no gates"
    if failing:
        named = ", ".join(c.gate if c.scope == "overall" else f"{c.gate}[{c.scope}]"
                          for c in failing if c.scope != "each session")
        parts += ["", f"REGRESSED · {summary} · B fails what A passed: {named}", ""]
        return "\n".join(parts), ExitCode.GATE
    parts += ["", f"no regression · {summary}", ""]
    return "\n".join(parts), ExitCode.OK


def compare_command(request: CompareRequest, out: IO[str] | None = None,
                    err: IO[str] | None = None) -> int:
    """Input: the two results files' paths; streams (default stdout/stderr).
    Output: the exit code (0 no regression, 1 regressed, 2 not comparable); the report on `out`,
    a one-line refusal on `err`."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        a, b = load_any(request.a), load_any(request.b)
        pairs = point_pairs(a, b)
        for _, x, y in pairs:
            reason = why_not_comparable(x, y)
            if reason:
                raise NotComparable(reason)
    except NotComparable as e:
        err.write(f"wl compare: {e}\n")
        return ExitCode.USAGE
    codes = []
    for value, x, y in pairs:
        if value is not None:
            out.write(f"══ {a.param} = {value} ══\n")
        text, code = compare_text(x, y, request.a, request.b)
        out.write(text + ("\n" if value is not None else ""))
        codes.append(code)
    if len(pairs) > 1 or pairs[0][0] is not None:
        regressed = [v for (v, _, _), c in zip(pairs, codes) if c]
        out.write(f"sweep of {a.param}: {len(pairs)} point(s) compared; "
                  + (f"REGRESSED at {', '.join(str(v) for v in regressed)}\n" if regressed
                     else "no regression\n"))
    out.flush()
    return max(codes)


def load_any(path: str) -> Any:
    """A results file of a run or of a sweep; `NotComparable` when it is neither."""
    from workloadlang.sweepresults import read_any

    try:
        return read_any(path)
    except ResultsFileError as e:
        raise NotComparable(str(e)) from None


def point_pairs(a: Any, b: Any) -> list[tuple[str | None, Results, Results]]:
    """The runs to compare: the two results, or a sweep's points with the other sweep's of the
    same value (at least one in common, over the same param)."""
    from workloadlang.sweepresults import SweepResults

    if isinstance(a, SweepResults) != isinstance(b, SweepResults):
        raise NotComparable("not comparable: one file is a sweep's results, the other a single "
                            "run's (compare a sweep with a sweep)")
    if not isinstance(a, SweepResults):
        return [(None, a, b)]
    if a.param != b.param:
        raise NotComparable(f"not comparable: A sweeps {a.param}, B sweeps {b.param}")
    theirs = dict(zip(b.values, b.points))
    pairs: list[tuple[str | None, Results, Results]] = [
        (v, x, theirs[v]) for v, x in zip(a.values, a.points) if v in theirs]
    if not pairs:
        raise NotComparable(f"not comparable: the sweeps of {a.param} share no value (A "
                            f"{', '.join(a.values)}; B {', '.join(b.values)})")
    return pairs
