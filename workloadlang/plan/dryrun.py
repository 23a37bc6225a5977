"""The dry-run: a plan as text a person can read (or its full JSON).

Input: a `Plan`. Output: a string: the header, the schedule table (per request, or summarised per
session and step when long; trace requests per trace session and label), the totals, what the
expectations assume, and each gate with the number of requests it reads.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from itertools import groupby
from typing import Any

from tabulate import tabulate

from workloadlang.plan import lanes
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


def span_cell(rs: list[PRequest], get: Callable[[PRequest], Any],
              fmt: Callable[[Any], str] = fmt_tokens) -> str:
    """A column of one or more requests: the first's value, or first→last."""
    first, last = fmt(get(rs[0])), fmt(get(rs[-1]))
    return first if len(rs) == 1 or first == last == "–" else f"{first}→{last}"


def some_cell(rs: list[PRequest], get: Callable[[PRequest], int | None]) -> str:
    """A column only some requests have: first→last when all do, else the largest and how
    many have it."""
    have = [v for v in map(get, rs) if v is not None]
    if len(have) == len(rs):
        return span_cell(rs, get)
    return "–" if not have else f"{fmt_tokens(max(have))} ({len(have)} of {len(rs)})"


def fmt_seconds(s: float | None) -> str:
    return "–" if s is None else f"{s:,.3f}s"


def wait_cell(rs: list[PRequest]) -> str:
    """The planned wait before one request (`1.250s`, `reading 40/s`, both joined by `+`), or
    the sum of a group's (`Σ 12.500s`, `+ reading` when some read their previous answer)."""
    total = sum(r.wait_before for r in rs)
    reading = [r.wait_per_token for r in rs if r.wait_per_token]
    if len(rs) == 1:
        parts = [fmt_seconds(total)] if total else []
        parts += [f"reading {1 / reading[0]:,.4g}/s"] if reading else []
        return " + ".join(parts) or "–"
    if not total and not reading:
        return "–"
    return f"Σ {fmt_seconds(total)}" + (" + reading" if reading else "")


OPTIONAL = [  # (header, after which column, present in the plan?, cell); inserted in turn
    ("wait", "index", lambda p: any(r.wait_before or r.wait_per_token for r in p.requests),
     wait_cell),
    ("lane", "index", lambda p: any(r.lane for r in p.requests),
     lambda rs: span_cell(rs, lambda r: r.lane, lambda v: v or "–")),
    ("send at", "index", lambda p: any(r.send_at is not None for r in p.requests),
     lambda rs: span_cell(rs, lambda r: r.send_at, fmt_seconds)),
    ("LRU cached", "exp. cached", lambda p: p.cache_model is not None,
     lambda rs: span_cell(rs, lambda r: r.lru_cached)),
    ("exp. max", "exp. cached", lambda p: any(r.expected_cached_max is not None
                                              for r in p.requests),
     lambda rs: some_cell(rs, lambda r: r.expected_cached_max)),
]


def values_cell(values: set[int]) -> str:
    """A few values as `a/b/c`, many as their range."""
    if len(values) > 4:
        return f"{min(values):,}..{max(values):,}"
    return "/".join(str(v) for v in sorted(values))


def group_row(rs: list[PRequest]) -> list[Any]:
    """One row for a run of requests of the same session (or trace), phase and label."""
    if len(rs) == 1:
        return request_row(rs[0])
    first, last = rs[0], rs[-1]
    idx = f"{first.index}..{last.index} ({len(rs)})" if len({r.index for r in rs}) > 1 else \
        f"{first.index} ({len(rs)})"
    abort = {r.abort_after for r in rs}
    session = first.session if first.session == last.session else \
        f"{first.session}..{last.session}"
    return [session, first.phase or "–", first.label, idx,
            f"{fmt_tokens(sum(r.new_tokens for r in rs))} Σ",
            f"{fmt_tokens(first.prompt_tokens)}→{fmt_tokens(last.prompt_tokens)}",
            f"{fmt_tokens(first.expected_cached)}→{fmt_tokens(last.expected_cached)}",
            values_cell({r.max_tokens for r in rs}),
            "–" if abort == {None} else "/".join(str(a) for a in sorted(abort, key=str))]


def schedule_table(plan: Plan, full: bool) -> str:
    """The schedule; with an `isolated` column when some request is timed alone."""
    reqs = list(plan.requests)
    if full or len(reqs) <= SUMMARY_ROWS:
        groups = [[r] for r in reqs]
    else:
        traced = {t.session for t in plan.traces}  # a trace's or arrivals' copies together
        keyf = lambda r: (r.session_name if r.send_at is not None or r.session_name  # noqa: E731
                          in traced else r.session, r.phase, r.label)
        groups = [list(g) for _, g in groupby(reqs, key=keyf)]
    rows = [group_row(g) for g in groups]
    headers, align = list(HEADERS), ["left"] * 3 + ["right"] * 6
    for header, after, present, cell in OPTIONAL:
        if present(plan):
            at = headers.index(after) + 1
            headers.insert(at, header)
            align.insert(at, "right")
            for row, g in zip(rows, groups):
                row.insert(at, cell(g))
    if any(r.isolated for r in reqs):
        rows = [row + [isolated_cell(g)] for row, g in zip(rows, groups)]
        headers.append("isolated")
        align.append("right")
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True,
                    colalign=align)


def totals_block(plan: Plan) -> str:
    t = plan.totals
    pct = 100 * t.expected_cached_tokens / t.prompt_tokens if t.prompt_tokens else 0.0
    # with an `exp. max`, what a perfect cache serves is a range: say which end each row is
    certain = " (certain)" if t.expected_cached_max_tokens is not None else ""
    rows = [
        ["requests", f"{t.requests:,}"],
        ["prompt tokens", f"{t.prompt_tokens:,}"],
        ["  to prefill cold", f"{t.cold_tokens:,}"],
        [f"  expected from cache{certain}", f"{t.expected_cached_tokens:,} ({pct:.1f}%)"],
        *extra_totals(plan),
        ["peak concurrent demand", f"{t.peak_inflight_tokens:,} tokens "
                                   f"({in_flight(plan)} "
                                   "in flight)"],
        ["working set (perfect cache)", f"{t.working_set_tokens:,} tokens"],
    ]
    for c in plan.calibrations:
        rows.append([f"calibrate {c.what}", "at run time"])
    return tabulate(rows, tablefmt="plain")


def in_flight(plan: Plan) -> int:
    """How many requests of the plan can be in flight at once: its concurrency limit, or fewer
    when its sessions (their forks, their caps) cannot fill it."""
    return min(plan.concurrency, lanes.in_flight(plan.requests, lanes.caps_of(plan.sessions)))


def share(n: int, of: int) -> str:
    return f"{n:,} ({100 * n / of if of else 0.0:.1f}%)"


def extra_totals(plan: Plan) -> list[list[str]]:
    """Totals rows shown only when the plan has them: what concurrent sessions could add,
    what the LRU cache of `--cache-tokens` serves."""
    t, rows = plan.totals, []
    if t.expected_cached_max_tokens is not None:
        rows.append(["  up to (possible: other sessions, branches first)"
                     if any(r.lane for r in plan.requests) else
                     "  up to (possible: other sessions first)",
                     share(t.expected_cached_max_tokens, t.prompt_tokens)])
    rows.extend(agent_totals(plan))
    if plan.cache_model is not None and t.lru_cached_tokens is not None:
        c = plan.cache_model
        rows.append([f"  LRU {c.tokens:,} / {c.block:,}",
                     share(t.lru_cached_tokens, t.prompt_tokens)])
    return rows


def agent_totals(plan: Plan) -> list[list[str]]:
    """Rows for tool calls and their results (how many, their tokens), and for replies
    replayed without their reasoning, when the plan has any."""
    calls = [s for m in plan.messages for s in m.segs if s.kind == "call"]
    results = [m for m in plan.messages if m.role == "tool"]
    rows = []
    if calls or results:
        result_tokens = sum(g.tokens for m in results for g in m.segs)
        rows.append(["tool calls", f"{len(calls):,} ({sum(c.tokens for c in calls):,} tokens), "
                     f"{len(results):,} results ({result_tokens:,} tokens)"])
    content = sum(r.reply_kept == "content" for r in plan.requests)
    if content:
        replies = sum(r.kind == "reply" for r in plan.requests)
        rows.append(["replayed without reasoning", f"{content:,} of {replies:,} replies "
                     "(`replay content`)"])
    return rows


def header_lines(plan: Plan) -> list[str]:
    """The head of the dry-run: workload, params, salt, hash, each trace replayed and each
    dataset text is taken from."""
    params = ", ".join(f"{k}={v}" for k, v in plan.params.items())
    head = [f"workload {plan.workload}: {plan.doc}", f"params: {params}",
            f"salt {plan.salt} · plan {plan.plan_hash} · concurrency {plan.concurrency}"
            + (f" · phases {' → '.join(plan.phases)}" if plan.phases else "")]
    head += arrival_lines(plan) + load_lines(plan)
    for tr in plan.traces:
        head.append(f"trace {tr.session}: {tr.path} ({tr.format}, {tr.records:,} records, "
                    f"{tr.selected:,} taken in {tr.sessions:,} session(s), time scale "
                    f"{tr.time_scale:g}, sha256 {tr.sha256[:16]})")
    for d in plan.datasets:
        words = f", {d.filler_words:,} words of filler" if d.filler_words else ""
        head.append(f"dataset {d.name}: {d.path} ({d.format}, {d.items:,} items, {d.taken:,} "
                    f"taken{words}, sha256 {d.sha256[:16]})")
    return head


def arrival_lines(plan: Plan) -> list[str]:
    """One line per session whose copies arrive (`arrive`) or are capped (`concurrency`):
    how many, from the first start to the last, and the cap."""
    out = []
    for name in dict.fromkeys(s.name for s in plan.sessions):
        copies = [s for s in plan.sessions if s.name == name]
        starts = [s.start_s for s in copies if s.start_s is not None]
        cap = copies[0].cap
        if not starts and cap is None:
            continue
        line = f"arrivals {name}: {len(copies):,} cop{'y' if len(copies) == 1 else 'ies'}"
        if starts:
            line += f" starting {fmt_seconds(min(starts))} → {fmt_seconds(max(starts))}"
        if cap is not None:
            line += f", at most {cap:,} running at once"
        out.append(line)
    return out


def load_lines(plan: Plan) -> list[str]:
    """One line per session whose requests are sent at a turn rate (every request planned at
    an instant, no copy arriving, no trace): how many, over how long, at what mean rate; then
    the run's duration and windows, and its SLOs."""
    out = []
    traced = {t.session for t in plan.traces}
    for name in dict.fromkeys(s.name for s in plan.sessions if s.start_s is None):
        sent = [r.send_at for r in plan.requests if r.session_name == name]
        times = [t for t in sent if t is not None]
        if name in traced or not times or len(times) < len(sent):
            continue
        first, last = min(times), max(times)
        rate = f" ({(len(times) - 1) / (last - first):.3g} a second)" if last > first else ""
        out.append(f"turns {name}: {len(times):,} requests sent {fmt_seconds(first)} → "
                   f"{fmt_seconds(last)}{rate}, the copies in turn")
    bits = [f"duration {fmt_seconds(plan.duration_s)}" if plan.duration_s else "",
            f"warm-up {fmt_seconds(plan.warmup_s)}" if plan.warmup_s else "",
            f"cool-down {fmt_seconds(plan.cooldown_s)}" if plan.cooldown_s else ""]
    if any(bits):
        out.append("run: " + ", ".join(b for b in bits if b) + " (the warm-up and cool-down "
                   "are left out of the metrics)")
    if plan.slo is not None:
        slo = plan.slo
        bounds = [f"{k} ≤ {fmt_seconds(v)}" for k, v in (("ttft", slo.ttft_s), (
            "tpot", slo.tpot_s), ("e2e", slo.e2e_s)) if v is not None]
        out.append(f"SLOs: {', '.join(bounds)}; sustained when {slo.attainment:.0%} of the "
                   "measured requests meet them all")
    return out


def assumptions_block(plan: Plan) -> str:
    lines = ["assumes:"]
    for a in plan.assumptions:
        lines.append(textwrap.fill(a, width=96, initial_indent="- ", subsequent_indent="  "))
    return "\n".join(lines)


def gates_block(plan: Plan) -> str:
    """The gates table: each gate's scope, severity, verdict, how many planned requests it
    reads (its condition's too) and its line; with a column for the `when` conditions when a
    gate has one."""
    rows = []
    conditions = any(gp.gate.when is not None for gp in plan.gates)
    for gp in plan.gates:
        g = gp.gate
        reads = gp.reads.get("overall")
        if reads is None:
            vals = sorted(set(gp.reads.values()))
            reads_s = f"{'/'.join(map(str, vals))} per session × {len(gp.reads)}"
        else:
            reads_s = str(reads)
        rows.append([g.name, "each session" if g.scope == "each_session" else "overall",
                     g.severity, g.verdict or "–", reads_s, f"line {g.span.line}",
                     *([g.when.text if g.when else "–"] if conditions else [])])
    headers = ["gate", "scope", "severity", "verdict", "reads", "source",
               *(["applies when"] if conditions else [])]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def render_plan(plan: Plan, full: bool = False) -> str:
    """The whole dry-run text."""
    parts = ["\n".join(header_lines(plan)), schedule_table(plan, full), totals_block(plan)]
    if plan.assumptions:
        parts.append(assumptions_block(plan))
    if plan.gates:
        parts.append(gates_block(plan))
    if not full and len(plan.requests) > SUMMARY_ROWS:
        parts.append(f"({len(plan.requests)} requests summarised per session and step; "
                     f"--full lists each one)")
    return "\n\n".join(parts) + "\n"
