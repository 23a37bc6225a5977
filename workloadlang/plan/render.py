"""The dry-run: a plan as text a person can read (or its full JSON).

Input: a `Plan`. Output: a string: the header, the schedule table (per request, or summarised per
session and step when long), the totals, and each gate with the number of requests it reads.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from tabulate import tabulate

from workloadlang.plan.model import Plan, PRequest

SUMMARY_ROWS = 60
HEADERS = ["session", "phase", "label", "index", "new", "prompt", "exp. cached", "max_tokens",
           "abort"]


def fmt_tokens(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def request_row(r: PRequest) -> list[Any]:
    return [r.session, r.phase or "–", r.label, r.index, fmt_tokens(r.new_tokens),
            fmt_tokens(r.prompt_tokens), fmt_tokens(r.expected_cached), r.max_tokens,
            "–" if r.abort_after is None else r.abort_after]


def isolated_cell(rs: list[PRequest]) -> str:
    """The `isolated` column of one or more requests: `yes`, `–`, or how many of them."""
    n = sum(r.isolated for r in rs)
    return "yes" if n == len(rs) else "–" if n == 0 else f"{n} of {len(rs)}"


def group_row(rs: list[PRequest]) -> list[Any]:
    """One row for a run of requests of the same session, phase and label."""
    if len(rs) == 1:
        return request_row(rs[0])
    first, last = rs[0], rs[-1]
    idx = f"{first.index}..{last.index} ({len(rs)})"
    abort = {r.abort_after for r in rs}
    return [first.session, first.phase or "–", first.label, idx,
            f"{fmt_tokens(sum(r.new_tokens for r in rs))} Σ",
            f"{fmt_tokens(first.prompt_tokens)}→{fmt_tokens(last.prompt_tokens)}",
            f"{fmt_tokens(first.expected_cached)}→{fmt_tokens(last.expected_cached)}",
            "/".join(str(m) for m in sorted({r.max_tokens for r in rs})),
            "–" if abort == {None} else "/".join(str(a) for a in sorted(abort, key=str))]


def schedule_table(plan: Plan, full: bool) -> str:
    """The schedule; with an `isolated` column when some request is timed alone."""
    reqs = list(plan.requests)
    if full or len(reqs) <= SUMMARY_ROWS:
        groups = [[r] for r in reqs]
    else:
        keyf = lambda r: (r.session, r.phase, r.label)  # noqa: E731
        groups = [list(g) for _, g in groupby(reqs, key=keyf)]
    rows = [group_row(g) for g in groups]
    headers, align = list(HEADERS), ["left"] * 3 + ["right"] * 6
    if any(r.isolated for r in reqs):
        rows = [row + [isolated_cell(g)] for row, g in zip(rows, groups)]
        headers.append("isolated")
        align.append("right")
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True,
                    colalign=align)


def totals_block(plan: Plan) -> str:
    t = plan.totals
    pct = 100 * t.expected_cached_tokens / t.prompt_tokens if t.prompt_tokens else 0.0
    rows = [
        ["requests", f"{t.requests:,}"],
        ["prompt tokens", f"{t.prompt_tokens:,}"],
        ["  to prefill cold", f"{t.cold_tokens:,}"],
        ["  expected from cache", f"{t.expected_cached_tokens:,} ({pct:.1f}%)"],
        ["peak concurrent demand", f"{t.peak_inflight_tokens:,} tokens "
                                   f"({plan.concurrency} in flight)"],
        ["working set (perfect cache)", f"{t.working_set_tokens:,} tokens"],
    ]
    for c in plan.calibrations:
        rows.append([f"calibrate {c.what}", "at run time"])
    return tabulate(rows, tablefmt="plain")


def gates_block(plan: Plan) -> str:
    rows = []
    for gp in plan.gates:
        g = gp.gate
        reads = gp.reads.get("overall")
        if reads is None:
            vals = sorted(set(gp.reads.values()))
            reads_s = f"{'/'.join(map(str, vals))} per session × {len(gp.reads)}"
        else:
            reads_s = str(reads)
        rows.append([g.name, "each session" if g.scope == "each_session" else "overall",
                     g.severity, g.verdict or "–", reads_s, f"line {g.span.line}"])
    return tabulate(rows, headers=["gate", "scope", "severity", "verdict", "reads", "source"],
                    tablefmt="simple", disable_numparse=True)


def render_plan(plan: Plan, full: bool = False) -> str:
    """The whole dry-run text."""
    params = ", ".join(f"{k}={v}" for k, v in plan.params.items())
    head = [f"workload {plan.workload}: {plan.doc}", f"params: {params}",
            f"salt {plan.salt} · plan {plan.plan_hash} · concurrency {plan.concurrency}"
            + (f" · phases {' → '.join(plan.phases)}" if plan.phases else "")]
    parts = ["\n".join(head), schedule_table(plan, full), totals_block(plan)]
    if plan.gates:
        parts.append(gates_block(plan))
    if not full and len(plan.requests) > SUMMARY_ROWS:
        parts.append(f"({len(plan.requests)} requests summarised per session and step; "
                     f"--full lists each one)")
    return "\n\n".join(parts) + "\n"
