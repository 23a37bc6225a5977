"""A run's latency, throughput, concurrency and goodput from its records (`latency.py`), the gate
metrics over them (`itl`, `tpot`, `slo_met`, `rate(...)`), the windows left out, and how the
terminal and the headline show them. docs/metrics.md."""

from __future__ import annotations

import pytest

from runexec import plan_of
from workloadlang import latency
from workloadlang.console.lines import summary_text
from workloadlang.gates import evaluate_gates, evaluate_report
from workloadlang.headline import fmt_value, headline
from workloadlang.report import sample
from workloadlang.results import ErrorDetail, Record, Slo
from workloadlang.run.record import base_record

ERR = ErrorDetail(kind="http", message="HTTP 500")


def rec(t: float, e2e: float, ttft: float = 0.1, gaps: list[float] | None = None,
        tokens: int = 11, **kw) -> Record:
    """A completed request sent at `t`: its TTFT, E2E, gaps and derived TPOT / output speed."""
    return sample.record(id=kw.pop("id", f"r{t}"), seq=0, t_start_s=t, e2e_s=e2e, ttft_s=ttft,
                         itl_s=gaps, completion_tokens=tokens, prompt_tokens=100,
                         cached_tokens=kw.pop("cached", 50),
                         tpot_s=latency.tpot(ttft, e2e, tokens),
                         output_tps=latency.output_tps(tokens, e2e), **kw)


def test_percentiles_interpolate_between_order_statistics() -> None:
    s = latency.spread(float(x) for x in range(1, 101))
    # numpy.percentile's default (linear): position q * (n - 1)
    assert (s.p50, s.p90, s.p95, s.p99) == pytest.approx((50.5, 90.1, 95.05, 99.01))
    assert (s.n, s.min, s.max, s.mean) == (100, 1.0, 100.0, 50.5)
    assert latency.spread([None, None]) is None


def test_rates_are_per_second_of_the_measured_window() -> None:
    rs = [rec(0.0, 1.0, window="warmup"), rec(1.0, 1.0), rec(2.0, 2.0), rec(3.0, 1.0),
          rec(3.5, 0.5, error=ERR), sample.record(id="s", seq=0, skipped="not run")]
    p = latency.performance(rs)
    assert p.window_s == pytest.approx(3.0)  # first measured send 1.0 -> last end 4.0
    assert (p.requests, p.completed, p.excluded) == (4, 3, 1)
    assert p.request_rate == pytest.approx(3 / 3.0)
    assert p.input_tps == pytest.approx(300 / 3.0)
    assert p.output_tps == pytest.approx(33 / 3.0)
    assert p.e2e.n == 3 and p.e2e.max == pytest.approx(2.0)
    assert p.hit_rate == pytest.approx(0.5)


def test_itl_pools_every_gap_of_every_request() -> None:
    rs = [rec(0, 1, gaps=[0.01, 0.02, 0.03]), rec(1, 1, gaps=[0.10]),
          rec(2, 1, gaps=[5.0], error=ERR)]  # an errored request's gaps are left out
    p = latency.performance(rs)
    assert p.itl.n == 4
    assert p.itl.p50 == pytest.approx(0.025) and p.itl.max == pytest.approx(0.10)


def test_concurrency_reached_over_time() -> None:
    # in flight: [0, 2), [1, 3), [1.5, 2.5): 1 -> 2 -> 3 -> 2 -> 1 -> 0
    rs = [rec(0.0, 2.0), rec(1.0, 2.0), rec(1.5, 1.0)]
    c = latency.performance(rs).concurrency
    assert c.max == 3
    area = 1 * 1.0 + 2 * 0.5 + 3 * 0.5 + 2 * 0.5 + 1 * 0.5
    assert c.mean == pytest.approx(area / 3.0)
    assert len(c.series) == latency.SERIES_BINS and max(n for _, n in c.series) == 3
    assert c.series[0] == (0.0, 1) and c.series[-1][1] == 1


def test_slo_met_bounds_ttft_tpot_e2e_and_counts_the_lag() -> None:
    slo = Slo(ttft_s=0.5, tpot_s=0.02, e2e_s=2.0)
    ok = rec(0, 1.0, ttft=0.2, tokens=41)  # tpot = 0.8 / 40 = 0.02
    assert latency.slo_met(ok, slo) is True
    assert latency.slo_met(ok.model_copy(update={"schedule_lag_s": 0.31}), slo) is False
    assert latency.slo_met(ok.model_copy(update={"tpot_s": 0.021}), slo) is False
    assert latency.slo_met(ok.model_copy(update={"e2e_s": 2.01}), slo) is False
    assert latency.slo_met(ok.model_copy(update={"error": ERR}), slo) is False
    one = rec(0, 0.3, ttft=0.3, tokens=1)  # no TPOT to bound
    assert one.tpot_s is None and latency.slo_met(one, slo) is True
    assert latency.slo_met(ok, None) is None
    assert latency.slo_met(sample.record(id="s", seq=0, skipped="x"), slo) is None


def test_goodput_is_the_requests_meeting_every_slo_per_second() -> None:
    rs = [rec(float(i), 1.0, slo_met=i not in (2, 5, 7)) for i in range(10)]
    g = latency.performance(rs, Slo(ttft_s=1.0, attainment=0.9)).goodput
    assert (g.met, g.judged) == (7, 10)
    assert g.attainment == pytest.approx(0.7) and g.rate == pytest.approx(7 / 10.0)
    assert g.sustained is False
    assert latency.performance(rs, Slo(ttft_s=1.0, attainment=0.7)).goodput.sustained is True
    assert latency.performance(rs).goodput is None


def test_windows() -> None:
    assert latency.window_of(1.0, 2.0, 1.0, 10.0) == "warmup"
    assert latency.window_of(9.0, 2.0, 1.0, 10.0) == "cooldown"
    assert latency.window_of(5.0, 2.0, 1.0, 10.0) is None
    assert latency.window_of(9.5, None, None, None) is None


# ---------------------------------------------------------------- gates and report

GATED = """
workload g {
  slo { ttft = 1s }
  session s repeat 3 { repeat 2 label turn { user "x"; reply 8 } }
  gates {
    itl99: overall p99(itl{turn}) < 45ms
    itl_each: overall itl{turn} < 50ms
    rps: overall rate(ok{turn}) >= 2
    good: overall fraction(slo_met{turn}) >= 80%
    tpot: overall max(tpot{turn}) < 100ms
  }
  report {
    n: count(ok{turn})
    goodput: rate(slo_met{turn})
    itl_p50: p50(itl{turn}) as seconds
    per_session: rate(ok{turn}) by session
  }
}
"""


def records_of(plan, gaps_of) -> list[Record]:
    """One answered record per planned request, sent one second apart, each with its gaps."""
    out = []
    for i, r in enumerate(plan.requests):
        g = gaps_of(i)
        out.append(Record(**base_record(r), t_start_s=float(i), e2e_s=0.5, ttft_s=0.1,
                          itl_s=g, completion_tokens=len(g) + 1, prompt_tokens=10,
                          tpot_s=latency.tpot(0.1, 0.5, len(g) + 1), expect_ok=True,
                          slo_met=i != 3, window="warmup" if i == 0 else None))
    return out


def gates_of(plan, recs) -> dict[str, object]:
    return {g.name: g for g in evaluate_gates(plan, recs, {})}


def test_gates_read_every_gap_rates_and_slos_over_the_measured_requests() -> None:
    plan = plan_of(GATED)
    assert len(plan.requests) == 6
    recs = records_of(plan, lambda i: [0.01 * (i + 1)] * 4)  # request i: gaps of (i+1)*10 ms
    got = gates_of(plan, recs)
    # the warm-up record (i = 0) is left out: requests 1..5, gaps 20..60 ms, 4 of each
    pooled = sorted(0.01 * (i + 1) for i in range(1, 6) for _ in range(4))
    assert got["itl99"].results[0].value == pytest.approx(latency.quantile(pooled, 0.99))
    assert got["itl99"].status == "fail"
    assert got["itl99"].exact == 20  # a value per gap
    each = got["itl_each"].results[0]
    # plan order: s#0's two turns, s#1's, s#2's; requests 4 and 5 have gaps of 50 and 60 ms
    assert each.status == "fail" and each.detail == "s#2/turn/0=0.05, s#2/turn/1=0.06"
    # 5 measured answers over the window from 1.0 to 5.5
    assert got["rps"].results[0].value == pytest.approx(5 / 4.5)
    assert got["good"].results[0].value == pytest.approx(4 / 5)
    assert got["tpot"].results[0].value == pytest.approx(0.4 / 4)
    report = evaluate_report(plan, recs, {})
    assert report["n"] == 5 and report["goodput"] == pytest.approx(4 / 4.5)
    assert report["itl_p50"] == pytest.approx(0.04)
    # per session, per second of the run's window (not of the session's own stretch)
    assert report["per_session"] == pytest.approx({"s#0": 1 / 4.5, "s#1": 2 / 4.5,
                                                   "s#2": 2 / 4.5})


def test_a_gate_on_the_goodput_passes_when_every_gap_is_short() -> None:
    plan = plan_of(GATED)
    got = gates_of(plan, records_of(plan, lambda i: [0.005, 0.006]))
    assert got["itl99"].status == "pass" and got["itl_each"].status == "pass"


def test_the_terminal_and_headline_show_latency_beside_the_cache() -> None:
    rs = [rec(float(i), 1.0, gaps=[0.00005, 0.012], slo_met=True) for i in range(5)]
    res = sample.results("g", "g.wl", rs, gates=[], params={}).model_copy(
        update={"performance": latency.performance(rs, Slo(ttft_s=1.0))})
    text = summary_text(res)
    assert "── latency and throughput: 5 measured request(s)" in text
    assert "ITL (every gap)" in text and "TPOT" in text and "E2E latency" in text
    assert "cache hit rate 50.0% of prompt tokens · goodput 1 req/s: 5 of 5" in text
    head = headline(res)
    assert head["itl p50"] == ("seconds", pytest.approx(0.006025))
    assert head["goodput"][1] == pytest.approx(1.0)
    assert fmt_value("seconds", 0.00005) == "50µs"
