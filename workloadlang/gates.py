"""Gates and report items, judged from run records exactly as declared.

Input: a `Plan` (its gates, report items, params), the run's `Record`s, and calibration results.
Output: `GateResult`s (per scope: pass / fail / unknown / undecidable with value, threshold and
the `.wl` line; what they make of the sessions and the run: `verdicts.py`), and the report's
headline numbers.

A gate that reads no data fails ("unknown" counts as not passed, labelled `unverified`); an
errored or skipped request is neither a hit nor a miss, so it never feeds cache evidence.

A first token whose stamp may be late (`Record.ttft_late_s`: the reader got it together with
later bytes) makes its TTFT, and what is derived from it, a range rather than a number
(`Span`); a prefill measured by the client's TTFT (`prefill_time` without the engine's own,
`pp`, `ttft_per_uncached`) also reaches down by the time other requests of the run were in
flight meanwhile (`Record.ttft_contended_s`: the engine may have spent it on them). Gates are
evaluated over such ranges (interval arithmetic: aggregates and `max` / `min` are monotone in
every value, `-` and `/` take the opposite ends); a comparison that holds at one end of the
ranges and not at the other is not judged ("unknown", with both ends in its detail) rather
than judged on the stamped value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from workloadlang import ir, latency
from workloadlang.evaluate import evaluate
from workloadlang.noise import Noise, noise_of, steady, twin_drifts
from workloadlang.plan.model import Plan
from workloadlang.results import GateResult, Record, ScopeResult, Status
from workloadlang.selector import select
from workloadlang.spans import (  # noqa: F401
    BOOLEAN,
    Span,
    Unknown,
    aggregate,
    arith,
    compare,
    ends,
    span_of,
    stamped,
    unknown_value,
)

METRICS: dict[str, Callable[[Record], Any]] = {
    "ttft": lambda r: r.ttft_s,
    "ttft_content": lambda r: r.ttft_content_s,
    "e2e": lambda r: r.e2e_s,
    "prompt_tokens": lambda r: r.prompt_tokens,
    "planned_prompt_tokens": lambda r: r.planned_prompt_tokens,
    "cached_tokens": lambda r: r.cached_tokens if r.error is None else None,
    "expected_cached": lambda r: r.expected_cached,
    "reuse": lambda r: r.reuse,
    "missed": lambda r: r.missed,
    "uncached_tokens": lambda r: r.uncached_tokens,
    "hit": lambda r: r.hit,
    "miss": lambda r: None if r.hit is None else not r.hit,
    "error": lambda r: r.error is not None,
    "aborted": lambda r: r.aborted,
    "ok": lambda r: bool(r.expect_ok) and (r.error is None),
    "cold_ok": lambda r: cold_ok(r),
    "cached_reported": lambda r: None if r.error else r.cached_source != "none",
    "ttft_agrees": lambda r: r.ttft_agrees,
    "ttft_disagrees": lambda r: None if r.ttft_agrees is None else not r.ttft_agrees,
    "prefill_work": lambda r: prefill_work(r),
    "prefill_time": lambda r: None if r.priced_at else r.prefill_s,
    "completion_tokens": lambda r: r.completion_tokens,
    "streamed_tokens": lambda r: r.streamed_tokens,
    "pp": lambda r: r.pp_tps,
    "tg": lambda r: r.tg_tps,
    "ttft_per_uncached": lambda r: None if r.priced_at else r.ttft_per_uncached,
    "server_ttft": lambda r: None if r.server_ttft_ms is None else r.server_ttft_ms / 1000,
    "isolation_wait": lambda r: r.isolation_wait_s if r.isolated else None,
    "schedule_lag": lambda r: r.schedule_lag_s,
    "itl": lambda r: r.itl_s if r.error is None else None,  # every gap: several values
    "tpot": lambda r: r.tpot_s,
    "output_tps": lambda r: r.output_tps,
    "slo_met": lambda r: r.slo_met,
}


def _scaled(r: Record, value: float | None, power: int, prefill: bool = False) -> Span | None:
    """Input: a record, a value proportional to its TTFT to the `power` (1 or -1), whether it
    stands for the prefill's own time. Output: the value's range over TTFTs from the least
    the stamp allows (`ttft_s - ttft_late_s`; for a prefill, less the time other requests were
    in flight, `ttft_contended_s`) to the stamp."""
    if value is None or not r.ttft_s:
        return None
    doubt = (r.ttft_late_s or 0.0) + ((r.ttft_contended_s or 0.0) if prefill else 0.0)
    if doubt <= 0:
        return None
    earliest = _at_least_zero(r.ttft_s - doubt)
    if power > 0:
        return Span(value * earliest / r.ttft_s, value, value)
    return Span(value, math.inf if earliest == 0 else value * r.ttft_s / earliest, value)


def _shared(r: Record) -> Span | None:
    """The engine's own prefill time, less the time other requests were in flight within it
    (`prefill_contended_s`: batches it may have shared) at the low end."""
    if r.prefill_s is None or not r.prefill_contended_s:
        return None
    return Span(_at_least_zero(r.prefill_s - r.prefill_contended_s), r.prefill_s, r.prefill_s)


def _at_least_zero(seconds: float) -> float:
    """Output: a time left after taking away a doubt, 0 when under a microsecond (the sums of
    clock differences that make a doubt leave rounding residue like 5e-12 s otherwise)."""
    return seconds if seconds >= 1e-6 else 0.0


def _tg_span(r: Record) -> Span | None:
    """Decode speed over the time after the first token: an earlier first token leaves more
    time for the same tokens (a lower speed)."""
    if (r.tg_tps is None or r.e2e_s is None or r.ttft_s is None or r.e2e_s <= r.ttft_s
            or not r.ttft_late_s):
        return None
    earliest = max(0.0, r.ttft_s - (r.ttft_late_s or 0.0))
    return Span(r.tg_tps * (r.e2e_s - r.ttft_s) / (r.e2e_s - earliest), r.tg_tps, r.tg_tps)


# metrics read from the first token's stamp: their range when that stamp may be late, and
# for those that stand for the prefill's own time, when other requests were in flight
SPANS: dict[str, Callable[[Record], Span | None]] = {
    "ttft": lambda r: _scaled(r, r.ttft_s, 1),
    "ttft_content": lambda r: _scaled(r, r.ttft_content_s, 1)
    if r.ttft_content_s == r.ttft_s else None,  # a later content delta: its own read
    "prefill_time": lambda r: _scaled(r, r.prefill_s, 1, prefill=True)
    if r.prefill_source == "client_ttft" else _shared(r),
    "pp": lambda r: _scaled(r, r.pp_tps, -1, prefill=True),
    "tg": _tg_span,
    "ttft_per_uncached": lambda r: _scaled(r, r.ttft_per_uncached, 1, prefill=True),
}


def metric_value(metric: str, r: Record, noise: Noise | None = None,
                 drift: float | None = None) -> Any:
    """Output: `metric` of record `r`: a `Span` when it is read from a first-token stamp
    that may be late, stands for a prefill that shared the engine, or is a time measured while
    the machine ran at another speed than for the first request of its stretch timed alone
    (`drifted`: at `drift` when given, its identical requests' reading, `noise.twin_drifts`,
    else its own) or, for that first request, in a stretch whose identical requests disagreed
    (`noise`: down to what it would have been that many times faster), else the plain value
    (None when unknown)."""
    v = METRICS[metric](r)
    if (v is not None and (r.ttft_late_s or r.ttft_contended_s or r.prefill_contended_s)
            and metric in SPANS):
        span = SPANS[metric](r)
        if span is not None and span.lo != span.hi:
            v = span
    drift = r.drift if drift is None else drift
    if v is not None and metric in DRIFTING and not steady(drift):
        return widened(v, drift)  # type: ignore[arg-type]
    if v is not None and metric in DRIFTING and noise is not None:
        lo, hi = ends(v)
        return Span(lo / noise.factor, hi, stamped(v))
    return v


# times that a machine running slower makes longer
DRIFTING = frozenset({"ttft", "prefill_time", "ttft_per_uncached"})


def drifted(r: Record) -> bool:
    """Output: True when `r` decoded more than `DRIFT_ALLOWANCE` times slower or faster per
    token than the first request of its stretch timed alone (`Record.drift`)."""
    return not steady(r.drift)


def widened(v: Any, drift: float) -> Span:
    """Output: the range of a time `v` (a value or a `Span`) measured on a machine `drift`
    times slower than the one it is compared with: from what it is to what it would have
    been at that one's speed."""
    lo, hi = ends(v)
    return Span(min(lo, lo / drift), max(hi, hi / drift), stamped(v))


def prefill_work(r: Record) -> float | None:
    """Sum of the positions prefilled (`(prompt² - cached²) / 2`): with a per-token cost that
    grows linearly with position, the cost of two prefills compares between their uncached-token
    ratio and their prefill_work ratio, so the larger of the two bounds a healthy slowdown."""
    if r.error or r.cached_tokens is None or r.prompt_tokens is None:
        return None
    return (r.prompt_tokens**2 - r.cached_tokens**2) / 2


def cold_ok(r: Record) -> bool | None:
    """A cold request (nothing expected from cache) that the engine did not claim to serve
    from cache beyond what was expected plus 5 % of the prompt (a harness sanity check); what
    requests of concurrent sessions could have left in the cache first (the plan's `exp.
    max`) counts as expected."""
    if r.error or r.cached_tokens is None or not r.prompt_tokens:
        return None
    allowed = max(r.expected_cached or 0, r.planned_expected_max or 0)
    return r.cached_tokens <= allowed + 0.05 * r.prompt_tokens


def flag_of(r: Record, flag: str) -> bool:
    return bool({"hit": r.hit is True, "miss": r.hit is False, "aborted": r.aborted,
                 "ok": bool(r.expect_ok) and r.error is None, "error": r.error is not None}[flag])


# ---------------------------------------------------------------- evaluation


class Judge:
    """Evaluates gate expressions over one scope's records."""

    def __init__(self, plan: Plan, records: list[Record], env: Mapping[str, Any],
                 by_id: Mapping[str, Any] | None = None, unknown_flags: bool = False,
                 span: tuple[float, float] | None = None,
                 noise: Mapping[str, Noise] | None = None,
                 drifts: Mapping[str, float] | None = None):
        self.plan, self.env = plan, env
        # anchor id -> how far apart its stretch's identical requests took (`noise`)
        self.noise = noise if noise is not None else noise_of(records, floor_of(env))
        # request id -> the drift it is read at, its identical requests' (`twin_drifts`)
        self.drifts = drifts if drifts is not None else twin_drifts(records, floor_of(env))
        self.by_id = by_id if by_id is not None else plan.by_id()
        self.records = latency.measured(records)  # sent, outside the warm-up and cool-down
        # the measured window `rate(...)` is per second of: the run's
        self.span = span if span is not None else latency.window(self.records)
        self.reads: set[str] = set()
        self.exact = self.ranges = 0
        self.unknown_ids: list[str] = []  # requests whose value read was unknown
        self.why: dict[str, str] = {}  # of those, why their record says it is unknown
        # of those, the ones unknown only because timing cannot tell at their size
        self.undecidable: set[str] = set()
        self.drifted: list[Record] = []  # ranges read that a drifting machine made
        # `hit` / `miss` in a selector: a request whose outcome is unknown is left out, or
        # (`unknown_flags`) taken in; `flag_unknown` counts such requests met
        self.unknown_flags, self.flag_unknown = unknown_flags, 0

    @property
    def unknown(self) -> int:
        return len(self.unknown_ids)

    def picked(self, ref: ir.MetricRef) -> list[Record]:
        rs = select(self.records, ref.selector, self.env, lambda r: self.by_id[r.id],
                    self._flag)
        self.reads.update(r.id for r in rs)
        return rs

    def _flag(self, r: Record, flag: str) -> bool:
        if flag in ("hit", "miss") and r.hit is None and r.error is None:
            self.flag_unknown += 1
            return self.unknown_flags
        return flag_of(r, flag)

    def values(self, ref: ir.MetricRef) -> list[Any]:
        """Output: the selected values; an unknown one as every value it could have had
        (`unknown_value`), counted with the exact ones and the ranges."""
        out: list[Any] = []
        for r in self.picked(ref):
            v = metric_value(ref.metric, r, self.noise.get(r.id), self.drifts.get(r.id))
            if isinstance(v, list):  # every gap of a request
                self.exact += len(v)
                out.extend(v)
                continue
            if v is None:
                self.mark_unknown(r, ref.metric)
                v = unknown_value(ref.metric)
            elif isinstance(v, Span):
                self.ranges += 1
                self.saw_drift(r, ref.metric)
            else:
                self.exact += 1
            out.append(v)
        return out

    def saw_drift(self, r: Record, metric: str) -> None:
        """Keep `r` for the detail when its `metric` is a range because the machine drifted
        (`drift`, `noise`)."""
        if metric in DRIFTING and (not steady(self.drifts.get(r.id, r.drift))
                                   or r.id in self.noise) and r not in self.drifted:
            self.drifted.append(r)

    def mark_unknown(self, r: Record, metric: str) -> None:
        """Count `metric` of `r` as not known, with why when its record says."""
        self.unknown_ids.append(r.id)
        if metric in ("prefill_time", "ttft_per_uncached") and r.priced_at and r.error is None:
            self.why[r.id] = (f"{r.uncached_tokens:,} tokens of its own prefill too quickly here "
                              f"to price a token apart from the noise; {r.priced_at:,} would")
            self.undecidable.add(r.id)
        if metric in ("ttft_agrees", "ttft_disagrees") and r.ttft_agrees_note:
            self.why[r.id] = r.ttft_agrees_note
            if r.decides_at is not None:
                self.undecidable.add(r.id)

    def scalar(self, e: ir.GExpr) -> Any:
        if isinstance(e, ir.GNum):
            v = evaluate(e.value, self.env)
            if v is None:
                raise Unknown("a calibration result is missing")
            return v
        if isinstance(e, ir.Agg) and e.func == "rate":
            if self.span is None:
                raise Unknown("no measured window (nothing was answered)")
            return arith("/", aggregate("sum", self.values(e.arg)), self.span[1] - self.span[0])
        if isinstance(e, ir.Agg):
            return aggregate(e.func, self.values(e.arg))
        if isinstance(e, ir.MetricRef):
            vals = self.values(e)
            if len(vals) != 1:
                raise Unknown(f"`{e.metric}` selects {len(vals)} values where one is needed")
            if isinstance(vals[0], Span) and vals[0].at is None:
                raise Unknown(f"not reported: {', '.join(self.unknown_ids[-1:])}")
            return vals[0]
        if isinstance(e, ir.GCall):
            vals = [self.scalar(a) for a in e.args]
            pick = max if e.func == "max" else min
            return span_of(pick(ends(v)[0] for v in vals), pick(ends(v)[1] for v in vals),
                           pick(stamped(v) for v in vals))
        left, right = self.scalar(e.left), self.scalar(e.right)
        return arith(e.op, left, right)


def undecided(value: Any, threshold: Any) -> str:
    """Output: why a comparison over ranges was not judged: the ranges of both sides."""
    def show(v: Any) -> str:
        lo, hi = ends(v)
        return fmt(v) if lo == hi else f"{fmt(lo)}..{fmt(hi)}"
    return (f"{show(value)} vs {show(threshold)}: times known only as ranges (a first-token "
            f"stamp that may be late or a prefill that may hold other requests' work: "
            f"ttft_late_s, ttft_contended_s, prefill_contended_s; or measured while the machine "
            f"ran at another speed: drift)")


def drift_detail(rs: list[Record], noise: Mapping[str, Noise] | None = None,
                 drifts: Mapping[str, float] | None = None) -> str:
    """Output: `; the machine drifted: ID decoded 2.9x slower than ID (3 tries)`, for the
    ranges a drifting machine made (`Record.drift`; `noise`: an anchor's stretch whose
    identical requests disagreed; `drifts`: read at their identical requests' drift,
    `noise.twin_drifts`), or "" for none."""
    if not rs:
        return ""
    def pace(d: float) -> str:
        return f"{d:.2g}x slower" if d > 1 else f"{1 / d:.2g}x faster"

    def said(r: Record) -> str:
        if noise and r.id in noise and not drifted(r):
            return noise[r.id].detail(r.id)
        read = (drifts or {}).get(r.id)
        priced = "" if read is None or read == r.drift else \
            f", priced {pace(read)} as its identical requests"
        return (f"{r.id} decoded {pace(r.drift or 1.0)} than {r.drift_of} ({r.attempts} "
                f"tr{'y' if r.attempts == 1 else 'ies'}{priced})")

    return "; the machine drifted: " + ", ".join(said(r) for r in rs[:3]) + (
        f" and {len(rs) - 3} more" if len(rs) > 3 else "")


def judge_scope(j: Judge, g: ir.Gate, scope: str) -> ScopeResult:
    """Output: the gate judged on one scope's records (`j`). When its selectors met requests
    whose hit or miss is unknown, it is judged again with them taken in: if that changes the
    outcome, the outcome is unknown."""
    out = judge_once(j, g, scope)
    if not j.flag_unknown or out.status == "unknown":
        return out
    again = judge_once(Judge(j.plan, j.records, j.env, j.by_id, True, j.span, j.noise, j.drifts),
                       g, scope)
    if again.status == out.status:
        return out
    return out.model_copy(update={"status": "unknown", "detail": (
        f"{j.flag_unknown} request(s) whose hit or miss is unknown could change it "
        f"({out.status} without them, {again.status} with them)")})


def judge_once(j: Judge, g: ir.Gate, scope: str) -> ScopeResult:
    """Output: the gate judged on one scope's records, its `when` condition first: false, the
    gate does not apply (`pass`, `not_applicable`); true, the gate's test decides; unknown,
    the gate passes only when its test passes (either way it would), else it is unknown."""
    if g.when is None:
        return judge_test(j, g, scope)
    jc = Judge(j.plan, j.records, j.env, j.by_id, j.unknown_flags, j.span,
               j.noise, j.drifts)  # the condition's
    cond = judge_test(jc, g.when, scope)
    j.flag_unknown += jc.flag_unknown
    if cond.status == "fail":
        shown = "" if cond.value is None else f": {applies_value(cond)}"
        return scope_result(jc, scope, "pass", None, None, not_applicable=1, detail=(
            f"does not apply: `{g.when.text}` is false{shown}"))
    out = with_reads(judge_test(j, g, scope), j, jc)
    if cond.status == "pass" or out.status == "pass":
        return out if cond.status == "pass" else out.model_copy(update={"detail": "; ".join(
            filter(None, [out.detail, f"whether `{g.when.text}` holds is not known "
                          f"({cond.detail}); it passes either way"]))})
    return out.model_copy(update={"status": "unknown", "detail": (
        f"whether it applies is not known: `{g.when.text}`: {cond.detail or 'unknown'}; "
        f"{out.status} if it does" + (f" ({out.detail})" if out.detail else ""))})


def with_reads(out: ScopeResult, j: Judge, jc: Judge) -> ScopeResult:
    """Output: a gate's result on a scope (`out`, read by `j`) with the values its condition
    read (`jc`) counted too."""
    return out.model_copy(update={
        "reads": len(j.reads | jc.reads), "exact": out.exact + jc.exact,
        "ranges": out.ranges + jc.ranges, "unknown": out.unknown + jc.unknown,
        "unknown_ids": (out.unknown_ids + jc.unknown_ids)[:20]})


def applies_value(cond: ScopeResult) -> str:
    """`12 vs 50`: the condition's value against its threshold (the value alone for a yes/no
    condition)."""
    return fmt(cond.value) + ("" if cond.threshold is None else f" vs {fmt(cond.threshold)}")


def judge_test(j: Judge, g: ir.Gate | ir.Condition, scope: str) -> ScopeResult:
    """Output: `LEFT [CMP RIGHT]` (a gate's test, or its condition's) judged on one scope:
    `pass` when it holds for every value the ranges and unknown values allow, `fail` when for
    none, else `unknown`."""
    try:
        if isinstance(g.left, ir.MetricRef) and g.op is not None and g.right is not None:
            return judge_each(j, g.left, g.op, g.right, scope)
        value = j.scalar(g.left)
        if g.op is None or g.right is None:
            lo, hi = ends(value)
            if bool(lo) != bool(hi):
                return scope_result(j, scope, "unknown", stamped(value), None,
                                    detail=left_out(j, decides=True))
            return scope_result(j, scope, "pass" if lo else "fail", stamped(value), None)
        threshold = j.scalar(g.right)
        ok = compare(g.op, value, threshold)
        if ok is None:
            why = left_out(j, decides=True) if j.unknown else undecided(value, threshold) \
                + drift_detail(j.drifted, j.noise, j.drifts)
            return scope_result(j, scope, "unknown", stamped(value), stamped(threshold), why)
        return scope_result(j, scope, "pass" if ok else "fail", stamped(value),
                            stamped(threshold))
    except Unknown as e:
        why = "; ".join([str(e)] + ([left_out(j, decides=True)] if j.unknown else []))
        return scope_result(j, scope, "unknown", None, None, why)


def scope_result(j: Judge, scope: str, status: Status, value: Any, threshold: Any,
                 detail: str = "", not_applicable: int = 0) -> ScopeResult:
    """Output: a `ScopeResult` with the judge's counts of exact, range and unknown values."""
    if not detail and j.unknown:
        detail = left_out(j, decides=False)
    if status == "unknown" and too_small_only(j):
        status, detail = "undecidable", f"not decidable at these sizes: {detail}"
    return ScopeResult(scope=scope, status=status, value=value, threshold=threshold,
                       reads=len(j.reads), exact=j.exact, ranges=j.ranges, unknown=j.unknown,
                       unknown_ids=j.unknown_ids[:20], not_applicable=not_applicable,
                       detail=detail)


def too_small_only(j: Judge) -> bool:
    """Output: True when what left a scope unknown is only values that timing cannot judge at
    their size on this engine (`Record.decides_at`): no range and no other unknown value."""
    return bool(j.unknown_ids) and not j.ranges and set(j.unknown_ids) <= j.undecidable


def left_out(j: Judge, decides: bool) -> str:
    """Output: what the unknown values were and whether they could change the outcome (with
    why the first of them was not known, when its record says)."""
    ids = ", ".join(j.unknown_ids[:5]) + (", ..." if j.unknown > 5 else "")
    effect = "could change the outcome" if decides else "cannot change the outcome"
    why = j.why.get(j.unknown_ids[0])
    return f"{j.unknown} value(s) not known ({ids}) {effect}" + (f": {why}" if why else "")


def judge_each(j: Judge, left: ir.MetricRef, op: str, right: ir.GExpr,
               scope: str) -> ScopeResult:
    """`metric{...} CMP rhs` (a test's `left`, `op`, `right`): every selected value must satisfy
    the comparison (each gap of `itl`)."""
    picked, vals = each_value(left.metric, j.picked(left), j.noise, j.drifts)
    if not picked:
        raise Unknown("no data: the selector matched no completed request")
    threshold = j.scalar(right)
    j.exact += sum(v is not None and not isinstance(v, Span) for v in vals)
    j.ranges += sum(isinstance(v, Span) for v in vals)
    for r, v in zip(picked, vals):
        if isinstance(v, Span):
            j.saw_drift(r, left.metric)
    for r, v in zip(picked, vals):
        if v is None:
            j.mark_unknown(r, left.metric)
    held = [None if v is None else compare(op, v, threshold) for v in vals]
    fails = [(r.id, v) for r, v, ok in zip(picked, vals, held) if ok is False]
    unknown = [r.id for r, v in zip(picked, vals) if v is None]
    open_ = [(r.id, v) for r, v, ok in zip(picked, vals, held) if v is not None and ok is None]
    known_vals = [stamped(v) for v in vals if v is not None]
    pick = min if op in (">", ">=") else max
    worst = stamped(fails[0][1]) if fails else (pick(known_vals) if known_vals else None)
    if fails:
        first: dict[str, Any] = {}  # a request once (`itl`: its first failing gap)
        for rid, v in fails:
            first.setdefault(rid, v)
        detail = ", ".join(f"{rid}={fmt(stamped(v))}" for rid, v in list(first.items())[:5])
        return scope_result(j, scope, "fail", worst, stamped(threshold), detail)
    if unknown or open_:
        why = "; ".join(
            ([errors_or_unreported(j, unknown)] if unknown else [])
            + [f"{rid}: {undecided(v, threshold)}" for rid, v in open_[:3]]) \
            + drift_detail(j.drifted, j.noise, j.drifts)
        return scope_result(j, scope, "unknown", None if unknown else worst,
                            stamped(threshold), why)
    return scope_result(j, scope, "pass", worst, stamped(threshold))


def each_value(metric: str, picked: list[Record], noise: Mapping[str, Noise],
               drifts: Mapping[str, float]) -> tuple[list[Record], list[Any]]:
    """Output: the selected records and their values of `metric`, a record once per value
    (`itl`: once per gap)."""
    pairs = [(r, x) for r in picked
             for x in as_list(metric_value(metric, r, noise.get(r.id), drifts.get(r.id)))]
    return [r for r, _ in pairs], [x for _, x in pairs]


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def errors_or_unreported(j: Judge, ids: list[str]) -> str:
    recs = {r.id: r for r in j.records}
    errs = [i for i in ids if recs[i].error is not None]
    if errs:
        return f"errored (neither hit nor miss): {', '.join(errs[:5])}"
    return f"not reported by the engine: {', '.join(ids[:5])}"


def fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def evaluate_gates(plan: Plan, records: list[Record], extra_env: Mapping[str, Any]) -> list[GateResult]:
    env = {**plan.params, **extra_env}
    by_id = plan.by_id()
    span = latency.window(latency.measured(records))
    by_session: dict[str, list[Record]] = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    noise = noise_of(records, floor_of(env))
    drifts = twin_drifts(records, floor_of(env))
    out = []
    for gp in plan.gates:
        g = gp.gate
        # an `each session` gate judges the sessions its selectors can read (`GatePlan.reads`)
        scopes = [s.id for s in plan.sessions if s.id in gp.reads] \
            if g.scope == "each_session" else ["overall"]
        results = []
        for scope in scopes:
            rs = records if scope == "overall" else by_session.get(scope, [])
            results.append(judge_scope(Judge(plan, rs, env, by_id, span=span, noise=noise,
                                             drifts=drifts), g, scope))
        status = overall_status([r.status for r in results])
        out.append(GateResult(name=g.name, scope="each session" if g.scope == "each_session"
                              else "overall", severity=g.severity, verdict=g.verdict,
                              line=g.span.line, status=status, results=results,
                              exact=sum(r.exact for r in results),
                              ranges=sum(r.ranges for r in results),
                              unknown=sum(r.unknown for r in results),
                              not_applicable=sum(r.not_applicable for r in results)))
    return out


def floor_of(env: Mapping[str, Any]) -> float:
    """Output: seconds a timing resolves here (`$timing_floor`, a busy host's 5 ms without
    it)."""
    v = env.get("timing_floor")
    return float(v) if isinstance(v, (int, float)) and v > 0 else 0.005


def overall_status(statuses: list[Status]) -> Status:
    """Output: a gate's status over its scopes: the worst of `fail`, `unknown`, `undecidable`,
    `pass`."""
    return next((s for s in ("fail", "unknown", "undecidable") if s in statuses), "pass")


def evaluate_report(plan: Plan, records: list[Record],
                    extra_env: Mapping[str, Any]) -> dict[str, Any]:
    """Headline numbers; an item with `by` gives a dict group -> number."""
    env, span = {**plan.params, **extra_env}, latency.window(latency.measured(records))
    # the run's stretches, read once for every item
    noise, drifts = noise_of(records, floor_of(env)), twin_drifts(records, floor_of(env))
    out: dict[str, Any] = {}
    for item in plan.report:
        if item.by is None:
            out[item.name] = safe_scalar(Judge(plan, records, env, span=span, noise=noise,
                                                 drifts=drifts), item.value)
        else:
            groups: dict[Any, list[Record]] = {}
            for r in records:
                groups.setdefault(getattr(r, item.by), []).append(r)
            out[item.name] = {str(k): safe_scalar(Judge(plan, v, env, span=span, noise=noise,
                                                       drifts=drifts), item.value)
                              for k, v in sorted(groups.items(), key=lambda kv: str(kv[0]).zfill(8))}
    return out


def safe_scalar(j: Judge, e: ir.GExpr) -> Any:
    """Output: the expression's value as stamped, or None when it cannot be computed."""
    try:
        return stamped(j.scalar(e))
    except Unknown:
        return None
