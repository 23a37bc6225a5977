"""Gates over TTFT values when a first token's stamp may be late (`ttft_late_s`): each such
TTFT is a range (`ttft - ttft_late_s` to `ttft`) and so is what is derived from it; a gate
judges only when every value in the ranges judges the same, else it is "unknown" with both
ends shown. A stamp without a flag is judged as before."""

from __future__ import annotations

import math

import pytest

from workloadlang.api import Source, make_plan, parse_checked
from workloadlang.gates import Span, aggregate, arith, compare, evaluate_gates, metric_value
from workloadlang.results import Record
from workloadlang.run.record import base_record

WL = """
workload w {
  session s repeat 2 { repeat 4 label step { user "hello"; reply 8 } }
  gates {
    fast: overall p95(ttft{step}) < 100ms
    each_fast: each session ttft{step} < 100ms
    spread: overall p99(ttft{step}) - p50(ttft{step}) < 30ms
    prefill_speed: overall median(pp{step}) > 1000
  }
}
"""


def plan():
    source = Source(name="w.wl", text=WL)
    return make_plan(parse_checked(source), source, {}, salt="t")


def records(p, ttft: dict[int, float], late: dict[int, float] | None = None,
            busy: dict[int, float] | None = None) -> list[Record]:
    """Output: a record per planned request (in plan order, numbered from 0) with TTFT
    `ttft.get(i, 0.05)`, flagged `late.get(i)`, other requests in flight for `busy.get(i)` of
    it, 100 uncached tokens, the client's TTFT as the prefill time."""
    late, busy = late or {}, busy or {}
    out = []
    for i, req in enumerate(p.requests):
        t = ttft.get(i, 0.05)
        out.append(Record(**base_record(req), prompt_tokens=100, cached_tokens=0,
                          uncached_tokens=100, ttft_s=t, ttft_late_s=late.get(i),
                          ttft_contended_s=busy.get(i), e2e_s=t + 0.05,
                          pp_tps=100 / t, prefill_s=t, prefill_source="client_ttft"))
    return out


def statuses(p, recs) -> dict[str, str]:
    return {g.name: g.status for g in evaluate_gates(p, recs, {})}


def test_a_stamp_that_may_be_late_across_the_threshold_leaves_the_gate_unjudged() -> None:
    p = plan()
    # request 0 stamped 0.2 s: too slow as stamped, and really 0.2 s at least when not flagged
    assert statuses(p, records(p, {0: 0.2, 1: 0.2})) == {
        "fast": "fail", "each_fast": "fail", "spread": "fail", "prefill_speed": "pass"}
    # flagged: it may have come as early as 0.05 s — each gate that then holds is not judged
    got = evaluate_gates(p, records(p, {0: 0.2, 1: 0.2}, {0: 0.15, 1: 0.15}), {})
    by = {g.name: g for g in got}
    assert {k: g.status for k, g in by.items()} == {
        "fast": "unknown", "each_fast": "unknown", "spread": "unknown", "prefill_speed": "pass"}
    fast = by["fast"].results[0]
    assert fast.value == pytest.approx(0.2) and fast.threshold == 0.1  # as stamped
    assert fast.detail.startswith("0.05..0.2 vs 0.1: ") and "ttft_late_s" in fast.detail
    each = {r.scope: r for r in by["each_fast"].results}
    assert each["s#0"].status == "unknown" and each["s#1"].status == "pass"
    assert each["s#0"].value == pytest.approx(0.2)


def test_a_late_stamp_that_cannot_change_the_verdict_does_not_hide_it() -> None:
    p = plan()
    # flagged 0.05 s: really 0.15-0.2 s, too slow either way
    assert statuses(p, records(p, {0: 0.2, 1: 0.2}, {0: 0.05, 1: 0.05}))["fast"] == "fail"
    assert statuses(p, records(p, {0: 0.2}, {0: 0.05}))["each_fast"] == "fail"
    # a fast one flagged: faster still, passes
    assert statuses(p, records(p, {}, {0: 0.04}))["fast"] == "pass"


def test_a_derived_speed_is_a_range_the_other_way() -> None:
    p = plan()
    recs = records(p, {i: 0.2 for i in range(8)}, {i: 0.15 for i in range(8)})
    v = metric_value("pp", recs[0])
    assert isinstance(v, Span) and v.at == pytest.approx(500) and v.lo == pytest.approx(500)
    assert v.hi == pytest.approx(2000)  # 100 tokens in 0.05 s
    # as stamped 500 tokens/s (< 1000), at the earliest 2000: not judged
    assert statuses(p, recs)["prefill_speed"] == "unknown"


def test_interval_arithmetic_and_comparisons() -> None:
    a, b = Span(1.0, 3.0, 3.0), Span(2.0, 2.5, 2.5)
    assert arith("-", a, b) == Span(-1.5, 1.0, 0.5)
    assert arith("+", a, 1.0) == Span(2.0, 4.0, 4.0)
    assert arith("*", a, -1.0) == Span(-3.0, -1.0, -3.0)
    assert arith("/", 6.0, a) == Span(2.0, 6.0, 2.0)
    assert compare("<", a, 4.0) is True and compare("<", a, 0.5) is False
    assert compare("<", a, 2.0) is None and compare(">=", a, 1.0) is True
    assert compare("==", a, 5.0) is False and compare("==", a, 2.0) is None
    assert compare("!=", a, 5.0) is True
    assert aggregate("max", [a, 0.5]) == Span(1.0, 3.0, 3.0)
    assert aggregate("p50", [a, b, 2.2]) == Span(2.0, 2.5, 2.5)
    assert aggregate("count", [a, None]) == 1
    with pytest.raises(Exception, match="may be zero"):
        arith("/", 1.0, Span(-1.0, 1.0, 1.0))


def test_an_unbounded_end_is_not_compared_as_nan() -> None:
    up = Span(1.0, math.inf, 1.0)
    with pytest.raises(Exception, match="without bounds"):
        arith("-", up, up)


def test_time_shared_with_other_requests_doubts_a_prefill_not_a_ttft() -> None:
    """`ttft_contended_s` widens what stands for the prefill's own time (`pp`, `prefill_time`
    from the client), not the TTFT a user waited."""
    p = plan()
    recs = records(p, {i: 0.2 for i in range(8)}, busy={i: 0.15 for i in range(8)})
    assert metric_value("ttft", recs[0]) == pytest.approx(0.2)
    assert metric_value("prefill_time", recs[0]) == Span(pytest.approx(0.05), 0.2, 0.2)
    got = statuses(p, recs)
    assert got["fast"] == "fail" and got["prefill_speed"] == "unknown"
    server = recs[0].model_copy(update={"prefill_source": "server", "prefill_s": 0.01})
    assert metric_value("prefill_time", server) == 0.01


def test_a_gate_is_unknown_when_values_it_could_not_read_could_change_it() -> None:
    """An unknown value stands for every value it could have had: a gate whose outcome one of
    them could change is unknown (its detail names how many and which), one whose outcome none
    of them can change is judged, and either way they are counted."""
    source = Source(name="w.wl", text=WL.replace(
        "fast: overall p95(ttft{step}) < 100ms", "fast: overall p95(ttft{step}) < 100ms\n"
        "    judged: overall count(hit{step}) == 0\n"
        "    floor: overall min(ttft{step}) < 100s\n"
        "    some: overall count(hit{step}) >= 0"))
    p = make_plan(parse_checked(source), source, {}, salt="t")
    recs = records(p, {})
    recs[0] = recs[0].model_copy(update={"ttft_s": None, "pp_tps": None, "prefill_s": None})
    by = {g.name: g for g in evaluate_gates(p, recs, {})}
    judged = by["judged"].results[0]  # hit: None on all 8: each could be a hit
    assert judged.status == "unknown" and judged.unknown == 8 and judged.exact == 0
    assert "8 value(s) not known" in judged.detail and recs[0].id in judged.detail
    assert judged.unknown_ids == [r.id for r in recs]
    fast = by["fast"].results[0]  # the unknown TTFT could be the slowest
    assert (fast.status, fast.unknown, fast.exact) == ("unknown", 1, 7)
    assert recs[0].id in fast.detail
    floor = by["floor"].results[0]  # ...but not below the fastest known one
    assert (floor.status, floor.unknown) == ("pass", 1)
    assert "cannot change" in floor.detail
    assert by["some"].status == "pass"
    assert (by["fast"].exact, by["fast"].ranges, by["fast"].unknown) == (7, 0, 1)


def test_the_engines_own_prefill_time_reaches_down_by_the_time_it_was_shared() -> None:
    p = plan()
    rec = records(p, {})[0].model_copy(update={"prefill_source": "server", "prefill_s": 0.3,
                                               "prefill_contended_s": 0.2})
    assert metric_value("prefill_time", rec) == Span(pytest.approx(0.1), 0.3, 0.3)
    assert metric_value("prefill_time", rec.model_copy(update={"prefill_contended_s": 0.0})) == 0.3
    # a doubt equal to the whole time but for rounding residue (sums of clock differences):
    # the low end is 0, not 5e-12 (shown as such in a gate's detail)
    almost = rec.model_copy(update={"prefill_contended_s": 0.3 - 5e-12})
    assert metric_value("prefill_time", almost) == Span(0.0, 0.3, 0.3)
    assert metric_value("pp", records(p, {0: 0.3}, busy={0: 0.3 - 5e-12})[0]).hi == math.inf


def test_survival_and_finalize_survival_cannot_disagree() -> None:
    """agent-sim's `survival` gate and its `finalize_survival` report item read one definition
    of a hit (the record's `hit`, reuse >= hit_ratio = miss_threshold): over any reuse the
    engine reports, a finalize that is a hit passes, one that is not fails, and the report is
    the share of finalizes that are hits."""
    import random

    from workloadlang.gates import evaluate_report
    from workloadlang.resources import bundled_workload_path
    from workloadlang.run.record import skipped_record

    path = bundled_workload_path("agent-sim")
    source = Source(name="workloads/agent-sim.wl", text=path.read_text(encoding="utf-8"))
    p = make_plan(parse_checked(source), source, {"sessions": "4", "main_tokens": "4k", "step_tokens": "1k",
                               "sub_tokens": "1k", "finalize_tokens": "500"}, salt="t")
    assert p.hit_ratio == p.params["miss_threshold"]
    rng = random.Random(7)
    for _ in range(50):
        recs = []
        for r in p.requests:
            reuse = rng.choice([0.0, 0.5, 0.65, 0.66, 0.67, 0.9, 1.0, None])
            hit = None if reuse is None else reuse >= p.hit_ratio
            recs.append(skipped_record(r, "").model_copy(update={
                "skipped": None, "reuse": reuse, "hit": hit, "prompt_tokens": r.prompt_tokens}))
        survival = next(g for g in evaluate_gates(p, recs, {}) if g.name == "survival")
        fins = {r.session: r for r in recs if r.label == "finalize"}
        for scope in survival.results:
            want = {True: "pass", False: "fail", None: "unknown"}[fins[scope.scope].hit]
            assert scope.status == want, (scope, fins[scope.scope].reuse)
        known = [f.hit for f in fins.values() if f.hit is not None]
        report = evaluate_report(p, recs, {})["finalize_survival"]
        assert report == (sum(known) / len(known) if known else None)


def test_a_timing_check_that_cannot_judge_says_why() -> None:
    from workloadlang.run.record import TtftReference, why_not_judged

    ref = TtftReference(cold_prefill_tps=10_000)
    assert "no cold prefill speed" in why_not_judged(5000, 10, 0.01, TtftReference())
    assert "under 256" in why_not_judged(200, 10, 0.01, ref)
    assert "timing cannot tell" in why_not_judged(300, 10, 0.01, ref)  # 30 ms vs 8 x 5 ms
    assert "other requests' work" in why_not_judged(5000, 10, 0.01, ref)
