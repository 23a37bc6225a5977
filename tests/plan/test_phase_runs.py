"""A phase inside a loop is a barrier each time it runs: `repeat 2 { phase grow {..} phase
flood {..} }` runs grow, flood, grow, flood across every session (not grow twice, then flood
twice). Planned as phases `grow → flood → grow#1 → flood#1`; a selector `{grow}` or
`phase=grow` reads every run of it. The run is checked against a loopback server that times
every request."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plan_semantics import plan_of

from faultserver import FaultServer
from runhelp import gate
from runhelp import wl_run_text as wl_run

LOOPED = """
workload looped {
  concurrency = 4
  session s repeat 2 {
    repeat 3 as i {
      phase grow { user "grow"; reply 4 label g }
      phase flood { user "flood"; reply 4 label f }
    }
  }
  gates {
    grown: overall count(ok{grow}) == 6
    flooded: each session count(ok{phase=flood}) == 3
  }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def test_each_run_of_a_phase_is_a_phase_of_the_plan():
    plan = plan_of(LOOPED)
    assert plan.phases == ("grow", "flood", "grow#1", "flood#1", "grow#2", "flood#2")
    s0 = [r.phase for r in plan.requests if r.session == "s#0"]
    assert s0 == ["grow", "flood", "grow#1", "flood#1", "grow#2", "flood#2"]
    assert {g.gate.name: g.reads for g in plan.gates} == {
        "grown": {"overall": 6}, "flooded": {"s#0": 3, "s#1": 3}}


def test_a_phase_named_twice_in_a_session_runs_twice_in_order():
    plan = plan_of("""workload w { session s repeat 2 {
      phase a { user "1"; reply 4 } phase b { user "2"; reply 4 } phase a { user "3"; reply 4 } } }""")
    assert plan.phases == ("a", "b", "a#1")


def test_phases_in_a_loop_run_in_loop_order_across_sessions(tmp_path: Path, server: FaultServer):
    # s#1 is slow, so without a barrier per run s#0 would race ahead into its next iteration
    server.fault_for = lambda rid, body: (
        {"x-fault": "slow", "x-tokens": "3", "x-interval-ms": "30"} if rid.startswith("s#1")
        else {"x-tokens": "2"})
    code, res = wl_run(tmp_path, LOOPED, "--base-url", server.base_url)
    assert code == 0, res.get("gates")
    assert gate(res, "grown")["status"] == gate(res, "flooded")["status"] == "pass"
    spans = server.spans
    order = ["grow", "flood", "grow#1", "flood#1", "grow#2", "flood#2"]
    by_phase = {p: [spans[rid] for rid in spans if rid.split("/")[1] == p] for p in order}
    assert all(len(v) == 2 for v in by_phase.values())
    for before, after in zip(order, order[1:]):
        assert max(end for _, end in by_phase[before]) < min(start for start, _ in by_phase[after])
