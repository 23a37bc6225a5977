"""What a run that could not judge everything says: no gate failed and one could not be judged
is `UNVERIFIED`, exit 6 (neither the pass of 0 nor the failure of 1); a gate that is unknown
only because timing cannot tell at these sizes is `undecidable` (its own state, not a failure);
a time measured while the machine ran at another speed than its stretch's first request is a
range (`Record.drift`); a busy client names the gates its load could have moved."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workloadlang.api import Source, make_plan, parse_checked
from workloadlang.console.lines import footer
from workloadlang.gates import evaluate_gates, metric_value
from workloadlang.results import ExitCode, GateResult, Record, ScopeResult
from workloadlang.resultsmodels import ClientHealth, EngineSummary
from workloadlang.run.record import base_record
from workloadlang.spans import Span
from workloadlang.sweepresults import worst_exit
from workloadlang.verdicts import client_could_move, session_verdicts, verdict_code

WL = """
workload w {
  session s repeat 2 {
    user filler 2k; reply 8 label fin
    probe isolated label check
    user filler 100; reply 8 isolated label base
  }
  gates {
    timing: each session any(ttft_agrees{check}) -> degraded
    kept: each session all(hit{fin}) -> evicted
    price: each session prefill_time{fin} < 2 * min(prefill_time{base}) -> degraded
    quick: overall max(ttft{fin}) < 1s
  }
}
"""


def plan():
    source = Source(name="w.wl", text=WL)
    return make_plan(parse_checked(source), source, {}, salt="t")


def recs(p, **by_label) -> list[Record]:
    """A record per planned request, each answered with a hit, 0.01 s of the engine's own
    prefill; `by_label[label]`: fields to set on that label's records."""
    out = []
    for req in p.requests:
        fields = dict(prompt_tokens=2000, cached_tokens=1990, uncached_tokens=10, hit=True,
                      ttft_s=0.02, e2e_s=0.05, prefill_s=0.01, prefill_source="server",
                      ttft_agrees=True, ttft_contended_s=0.0)
        fields.update(by_label.get(req.label, {}))
        out.append(Record(**base_record(req), **fields))
    return out


def scope(status: str) -> ScopeResult:
    return ScopeResult(scope="s#0", status=status)


def gate(name: str, status: str, severity: str = "fail") -> GateResult:
    return GateResult(name=name, scope="each session", severity=severity, verdict=name,
                      line=1, status=status, results=[scope(status)])


def test_the_exit_code_says_fail_unverified_or_pass() -> None:
    assert ExitCode.UNVERIFIED == 6
    assert verdict_code([gate("a", "pass"), gate("b", "fail"), gate("c", "unknown")]) == 1
    assert verdict_code([gate("a", "pass"), gate("c", "unknown")]) == 6
    assert verdict_code([gate("a", "pass"), gate("c", "undecidable")]) == 6
    assert verdict_code([gate("a", "pass"), gate("w", "unknown", "warn")]) == 0


def test_the_summary_line_says_unverified_and_which_gates() -> None:
    res = SimpleNamespace(exit_code=6, workload="w", records=[], elapsed_s=1.0, salt="x",
                          incomplete=None, client=ClientHealth(), engine=EngineSummary(),
                          gates=[gate("timing", "undecidable"), gate("kept", "unknown"),
                                 gate("price", "pass")])
    line = footer(res)
    assert line.startswith("UNVERIFIED (no gate failed; timing not decidable at these sizes in 1 "
                           "of 1 scope(s); kept could not be judged in 1 of 1 scope(s))"), line
    res.exit_code, res.gates = 1, [gate("kept", "fail"), gate("timing", "unknown")]
    assert footer(res).startswith("FAIL (a gate failed: kept)")


def test_a_sweep_ends_with_its_worst_point_unverified_below_a_failure() -> None:
    assert worst_exit([0, 6, 0]) == 6
    assert worst_exit([0, 6, 1]) == 1
    assert worst_exit([6, 4]) == 4 and worst_exit([1, 130]) == 130 and worst_exit([]) == 0


def test_timing_that_cannot_tell_at_this_size_is_undecidable_not_a_failure() -> None:
    p = plan()
    small = dict(ttft_agrees=None, ttft_agrees_note="too small", decides_at=9000)
    gates = evaluate_gates(p, recs(p, check=small), {})
    timing = next(g for g in gates if g.name == "timing")
    assert timing.status == "undecidable"
    assert timing.results[0].detail.startswith("not decidable at these sizes: ")
    assert session_verdicts(p, gates) == {"s#0": "undecidable", "s#1": "undecidable"}
    assert verdict_code(gates) == ExitCode.UNVERIFIED
    # unknown for another reason (an engine that did not say): unknown, unverified
    other = dict(ttft_agrees=None, ttft_agrees_note="no prefill time")
    gates = evaluate_gates(p, recs(p, check=other), {})
    assert next(g for g in gates if g.name == "timing").status == "unknown"
    assert set(session_verdicts(p, gates).values()) == {"unverified"}
    # with a finding, the session says the finding, not the size
    gates = evaluate_gates(p, recs(p, check=small, fin={"hit": False}), {})
    assert set(session_verdicts(p, gates).values()) == {"evicted"}
    assert verdict_code(gates) == ExitCode.GATE


def test_a_time_measured_on_a_drifted_machine_is_a_range_to_the_anchor_s_speed() -> None:
    p = plan()
    (base,) = [r for r in recs(p, base={"drift": 3.0, "drift_of": "s#0/fin/0"})
               if r.session == "s#0" and r.label == "base"]
    assert metric_value("prefill_time", base) == Span(pytest.approx(0.01 / 3), 0.01, 0.01)
    assert metric_value("cached_tokens", base) == 1990  # counts do not drift
    within = base.model_copy(update={"drift": 1.4})
    assert metric_value("prefill_time", within) == 0.01
    # the finalize at 0.015 s against 2x the baseline: 0.02 s as measured, 0.0067 s at the
    # finalize's speed: either way it could be, so `price` is not judged, and says why
    gates = evaluate_gates(p, recs(p, fin={"prefill_s": 0.015},
                                   base={"drift": 3.0, "drift_of": "s#0/fin/0"}), {})
    price = next(g for g in gates if g.name == "price")
    assert price.status == "unknown" and "the machine drifted" in price.results[0].detail
    # one that holds at both ends is judged
    gates = evaluate_gates(p, recs(p, fin={"prefill_s": 0.005},
                                   base={"drift": 3.0, "drift_of": "s#0/fin/0"}), {})
    assert next(g for g in gates if g.name == "price").status == "pass"


def test_a_busy_client_names_the_gates_it_could_have_moved() -> None:
    p = plan()
    rs = recs(p, fin={"prefill_source": "client_ttft"})
    # `quick` reads the TTFT the client measured of a request not timed alone; `price` the
    # finalize's prefill that is its TTFT; `kept` counts, `timing` requests timed alone
    assert client_could_move(p, rs, p.params) == ["price", "quick"]
    assert client_could_move(p, recs(p), p.params) == ["quick"]


TWINS = """
workload w {
  session s repeat 1 {
    user filler 2k; reply 8 label main
    spawn 1 fork isolated label fin { user filler 300; reply 8 }
    spawn 3 fork isolated label base { user filler 300; reply 8 }
  }
  gates {
    price: each session prefill_time{fin} < 1.5 * min(prefill_time{base}) -> degraded
  }
}
"""


def twins(fin: float, bases: list[float], drifts: list[float] | None = None,
          **extra) -> tuple[object, list[Record]]:
    """Output: the plan of `TWINS` and its records: the finalize's prefill time `fin`, the
    baselines' `bases` (seconds, the engine's own), each baseline decoding at the finalize's
    pace unless `drifts` (one a baseline) or `extra` (fields for every baseline) say."""
    source = Source(name="w.wl", text=TWINS)
    p = make_plan(parse_checked(source), source, {}, salt="t")
    out, times, paces = [], iter(bases), iter(drifts or [1.0] * len(bases))
    fin_id = next(r.id for r in p.requests if r.label == "fin")
    for req in p.requests:
        fields = dict(prompt_tokens=req.prompt_tokens, cached_tokens=2000, hit=True,
                      ttft_s=0.02, e2e_s=0.05, prefill_s=0.01, prefill_source="server",
                      ttft_contended_s=0.0)
        if req.label == "fin":
            fields["prefill_s"] = fin
        if req.label == "base":
            fields.update({"prefill_s": next(times), "drift": next(paces), "drift_of": fin_id,
                           **extra})
        out.append(Record(**base_record(req), **fields))
    return p, out


def test_identical_baselines_that_disagree_make_the_finalize_a_range() -> None:
    """The fastest of baselines of the same work not confirmed by the next (1.6x apart: the
    machine's speed moved within the stretch in a way their decode paces did not show): the
    finalize, which nothing can repeat, may have run at the other speed, so its time reaches
    down by that factor. A finalize over the bound at the time measured but not at that speed
    is not judged (no false degraded); one over it even then is still degraded; one under it
    still passes. A slower baseline beside two that agree is noise, not the machine's speed."""
    from workloadlang.noise import noise_of

    p, rs = twins(2.0, [1.0, 1.8, 1.6])
    fin = next(r for r in rs if r.label == "fin")
    (noise,) = noise_of(rs, 0.001).values()
    assert noise.factor == pytest.approx(1.601 / 1.001) and noise.fast.endswith("base/0")
    assert noise.slow.endswith("base/2")
    assert metric_value("prefill_time", fin, noise) == Span(pytest.approx(2.0 / noise.factor),
                                                            2.0, 2.0)
    (price,) = evaluate_gates(p, rs, {"timing_floor": 0.001})
    assert price.status == "unknown", price
    assert "ran at speeds 1.6x apart" in price.results[0].detail
    (price,) = evaluate_gates(*twins(3.0, [1.0, 1.8, 1.6]), {"timing_floor": 0.001})
    assert price.status == "fail", "over the bound even at the fastest speed seen"
    (price,) = evaluate_gates(*twins(1.2, [1.0, 1.8, 1.6]), {"timing_floor": 0.001})
    assert price.status == "pass"
    # the two fastest agree (within 1.5x): the finalize is judged as measured
    for bases in ([1.0, 1.2, 1.1], [2.9, 1.0, 1.3]):
        (price,) = evaluate_gates(*twins(2.0, bases), {"timing_floor": 0.001})
        assert price.status == "fail", bases
    # a baseline that drifted by its decode pace is read for itself, not as the stretch's noise
    p, rs = twins(2.0, [1.0, 1.8, 1.6], drift=2.0)
    assert noise_of(rs, 0.001) == {}
    # times near nothing do not disagree by their noise: the floor is added to each
    p, rs = twins(0.004, [0.001, 0.003, 0.002])
    assert noise_of(rs, 0.005) == {}


def test_identical_baselines_that_slowed_down_are_priced_together() -> None:
    """llama-server under a CPU load placed after its finalize: the three baselines (the same
    work) prefilled 2.26, 2.17 and 2.08 s, within 1.5x of one another, and decoded 34x, 3.7x
    and 3.6x slower than the finalize (a short decode on a shared CPU slows far more than a
    prefill). Each one's range holds the same price, so the price is at least the second
    highest of their lower ends (2.17 / 3.73), not 2.26 / 34: a finalize under the bound even
    there passes; one between that and the bound at the measured speed is still a range; one
    over it still fails. Two baselines, or prefill times that disagree, are read each for
    itself; one baseline whose decode shows less of the drift (a drift that ended during it)
    does not raise the price."""
    from workloadlang.noise import twin_drifts

    bases, paces = [2.26, 2.17, 2.08], [34.2, 3.73, 3.55]
    p, rs = twins(0.8, bases, paces)
    read = twin_drifts(rs, 0.001)
    assert sorted(read.values()) == pytest.approx([3.55, 3.73, 2.26 / (2.17 / 3.73)])
    (price,) = evaluate_gates(p, rs, {"timing_floor": 0.001})
    assert price.status == "pass", price  # 0.8 < 1.5 x 0.58
    assert "priced" not in price.results[0].detail
    (price,) = evaluate_gates(*twins(1.0, bases, paces), {"timing_floor": 0.001})
    assert price.status == "unknown" and "priced 3.9x slower as its identical requests" in \
        price.results[0].detail, price
    (price,) = evaluate_gates(*twins(3.5, bases, paces), {"timing_floor": 0.001})
    assert price.status == "fail"
    # each for itself: two baselines (the third not answered); prefill times 1.9x apart
    p, rs = twins(0.8, bases, paces)
    two = [r for r in rs if not r.id.endswith("base/2")]
    p, three = twins(0.8, [2.26, 2.17, 4.2], [34.2, 3.73, 3.6])
    for kept in (two, three):
        assert twin_drifts(kept, 0.001) == {}
        (price,) = evaluate_gates(p, kept, {"timing_floor": 0.001})
        assert price.status == "unknown"
    # two that did not drift (0.75x, 0.89x) price the third with them: not a range at all
    p, rs = twins(1.9, [1.97, 1.95, 2.38], [0.75, 0.89, 36.2])
    assert list(twin_drifts(rs, 0.001).values()) == pytest.approx([2.38 / 1.95])
    (price,) = evaluate_gates(p, rs, {"timing_floor": 0.001})
    assert price.status == "pass" and price.results[0].ranges == 0, price
    # a drift that ended during the third: its lower end (2.0 / 1.6) is left out
    p, rs = twins(1.1, [2.0, 2.0, 2.0], [3.0, 3.0, 1.6])
    assert sorted(twin_drifts(rs, 0.001).values()) == pytest.approx([1.6, 3.0, 3.0])
    (price,) = evaluate_gates(p, rs, {"timing_floor": 0.001})
    assert price.status == "unknown"  # 1.1 > 1.5 x 2.0 / 3
