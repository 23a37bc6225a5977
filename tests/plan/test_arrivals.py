"""Open-loop arrivals: `session NAME repeat N arrive every GAP [burst K]`, `arrive at TIMES`,
and a session's `concurrency` cap.

Plan: the starts (deterministic from the salt, a Poisson process at its rate), bursts, explicit
times, the first request's `send_at`, the dry-run's lines. Run (a loopback server timing each
request): each copy's first request is sent at its planned time (its `schedule_lag_s` small),
the cap holds, a copy waiting for its place is sent late and flagged.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from test_plan_semantics import plan_errors, plan_of

from faultserver import FaultServer
from runhelp import wl_run_text as wl_run
from workloadlang.plan.dryrun import render_plan

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

POISSON = """workload poisson {
  params { rate: float = 50; n: int = 400 }
  session tenant repeat $n arrive every exponential(1s / $rate) { user filler 20; reply 4 }
}"""


def starts(plan) -> list[float]:
    return [s.start_s for s in plan.sessions]


def test_poisson_arrivals_are_seeded_and_have_their_rate():
    a, b, c = plan_of(POISSON, salt="x"), plan_of(POISSON, salt="x"), plan_of(POISSON, salt="y")
    assert starts(a) == starts(b) and a.plan_hash == b.plan_hash and starts(a) != starts(c)
    t = starts(a)
    assert t[0] == 0 and t == sorted(t)
    gaps = [y - x for x, y in zip(t, t[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.15)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1, rel=0.2)
    # the first request of each copy is sent at its start
    assert [r.send_at for r in a.requests] == t


def test_constant_gaps_bursts_and_explicit_times():
    plan = plan_of("""workload w {
      session every repeat 3 arrive every 250ms { user "a"; reply 4 }
      session burst repeat 5 arrive every 1s burst 2 { user "b"; reply 4 }
      session at arrive at [0s, 100ms, 3s] { wait 50ms; user "c"; reply 4 }
      session one repeat 2 arrive at 2s { user "d"; reply 4 }
      session plain { user "e"; reply 4 }
    }""")
    by = {}
    for s in plan.sessions:
        by.setdefault(s.name, []).append(s.start_s)
    assert by == {"every": [0, 0.25, 0.5], "burst": [0, 0, 1, 1, 2], "at": [0, 0.1, 3],
                  "one": [2, 2], "plain": [None]}
    at = [r for r in plan.requests if r.session_name == "at"]
    assert [r.send_at for r in at] == [0.05, 0.15, 3.05]  # a wait before the first counts
    text = render_plan(plan)
    assert "arrivals burst: 5 copies starting 0.000s → 2.000s" in text
    assert "send at" in text.split("\n\n")[1].splitlines()[0]


def test_explicit_times_must_match_the_copies():
    errs = plan_errors('workload w { session s repeat 2 arrive at [0s, 1s, 2s] { user "x"; reply 4 } }')
    assert [d.code for d in errs] == ["WL404"] and "3 time(s) for 2 copies" in errs[0].message


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def test_copies_are_sent_at_their_planned_times(tmp_path: Path, server: FaultServer):
    text = """workload w { session t repeat 6 arrive every 200ms { user "x"; reply 4 } }"""
    code, res = wl_run(tmp_path, text, "--base-url", server.base_url)
    assert code == 0
    recs = sorted(res["records"], key=lambda r: r["planned_send_at"])
    assert [r["planned_send_at"] for r in recs] == pytest.approx([0, .2, .4, .6, .8, 1.0])
    for r in recs:
        assert r["t_start_s"] >= r["planned_send_at"]
        assert 0 <= r["schedule_lag_s"] < 0.1
    starts = sorted(s for s, _ in server.spans.values())
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) > 0.15  # not sent together
    assert res["client"]["scheduled"] == 6


def test_the_cap_holds_and_a_copy_waiting_for_its_place_is_flagged(tmp_path: Path,
                                                                  server: FaultServer):
    server.defaults = {"x-fault": "slow", "x-tokens": "5", "x-interval-ms": "60"}
    text = """workload w {
      session t repeat 6 arrive every 10ms concurrency 2 { user "x"; reply 4; user "y"; reply 4 }
      gates { on_time: overall max(schedule_lag{}) < 10ms warn }
    }"""
    code, res = wl_run(tmp_path, text, "--base-url", server.base_url)
    assert code == 0  # a warning
    assert server.max_inflight == 2
    firsts = [r for r in res["records"] if r["planned_send_at"] is not None]
    assert len(firsts) == 6 and max(r["schedule_lag_s"] for r in firsts) > 0.3
    assert res["client"]["schedule_late"] >= 4
    # the wait for a place is the schedule's lag, not the client's own delay
    assert res["client"]["client_delay_max_ms"] < 250
    on_time = next(g for g in res["gates"] if g["name"] == "on_time")
    assert on_time["status"] == "fail"
