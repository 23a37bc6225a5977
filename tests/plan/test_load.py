"""The planner's load over time: turns sent at a rate (the copies taking the instants in turn),
the run's duration cutting the schedule, the warm-up and cool-down windows, the SLOs, and the
values that are refused before anything is sent (docs/language.md "Turn rate")."""

from __future__ import annotations

import pytest

from runexec import plan_of
from workloadlang import api
from workloadlang.diagnostics import WorkloadError

TURNS = """
workload t {
  params { rate: float = 1 in 0.01..; d: float = 100 }
  duration = 1s * $d
  session u repeat 3 turns every 1s / $rate { repeat 2 label turn { user "x"; reply 4 } }
}
"""


def sends(plan) -> dict[str, float]:
    return {r.id: r.send_at for r in plan.requests}


def test_the_copies_take_the_instants_in_turn() -> None:
    plan = plan_of(TURNS, rate="2")
    # instant k at k / rate: copy 0's first turn, copy 1's, copy 2's, then their second turns
    assert sends(plan) == {"u#0/turn/0": 0.0, "u#1/turn/0": 0.5, "u#2/turn/0": 1.0,
                           "u#0/turn/1": 1.5, "u#1/turn/1": 2.0, "u#2/turn/1": 2.5}
    # each copy stays in order: its second turn depends on its first
    second = next(r for r in plan.requests if r.id == "u#1/turn/1")
    assert second.deps == ("u#1/turn/0",)
    assert all(s.start_s is None for s in plan.sessions)  # every copy starts at once


def test_a_poisson_rate_draws_the_same_instants_for_the_same_salt() -> None:
    text = TURNS.replace("turns every 1s / $rate", "turns every exponential(1s / $rate)")
    a, b = plan_of(text, rate="4"), plan_of(text, rate="4")
    assert sends(a) == sends(b)
    times = sorted(sends(a).values())
    assert times[0] == 0.0 and len(set(times)) == 6  # a gap per instant
    source = api.Source(name="t.wl", text=text)
    other = api.make_plan(api.parse_checked(source), source, {"rate": "4"}, salt="other",
                          env={"max_context": 65536})
    assert sends(other) != sends(a)


def test_the_duration_cuts_the_schedule_and_the_rest_of_each_copy() -> None:
    plan = plan_of(TURNS, rate="2", d="1.25")
    # planned at 1.5 and later: left out (and what follows each in its copy)
    assert sends(plan) == {"u#0/turn/0": 0.0, "u#1/turn/0": 0.5, "u#2/turn/0": 1.0}
    assert [s.requests for s in plan.sessions] == [1, 1, 1]
    assert [r.seq for r in plan.requests] == [0, 1, 2]
    assert plan.duration_s == 1.25
    assert plan_of(TURNS, rate="2", d="1.1").sessions[-1].id == "u#2"


def test_a_copy_with_nothing_left_is_left_out() -> None:
    plan = plan_of(TURNS, rate="2", d="0.9")
    assert [s.id for s in plan.sessions] == ["u#0", "u#1"]


WINDOWS = """
workload w {
  params { warm: duration = 1s; cool: duration = 1s; d: float = 10 }
  duration = 1s * $d
  warmup = $warm
  cooldown = $cool
  slo { ttft = 2s, tpot = 50ms, e2e = 1min, attainment = 95% }
  session s { user "x"; reply 4 }
}
"""


def test_windows_and_slos_are_in_the_plan() -> None:
    plan = plan_of(WINDOWS)
    assert (plan.duration_s, plan.warmup_s, plan.cooldown_s) == (10.0, 1.0, 1.0)
    assert plan.slo.model_dump() == {"ttft_s": 2.0, "tpot_s": 0.05, "e2e_s": 60.0,
                                     "attainment": 0.95}


def test_a_plan_without_them_hashes_as_before() -> None:
    plain = plan_of('workload w { session s { user "x"; reply 4 } }')
    assert plain.slo is None and plain.duration_s is None
    dumped = plain.model_dump_json()
    assert "slo" not in dumped and "duration_s" not in dumped


@pytest.mark.parametrize("params, message", [
    ({"warm": "6s", "cool": "5s"}, "leave nothing of the `duration`"),
    ({"d": "-5"}, "`duration` must be above 0s, but it is -5s here"),
    ({"d": "0"}, "`duration` must be above 0s"),
])
def test_windows_that_leave_nothing_and_a_negative_duration_are_refused(params, message) -> None:
    with pytest.raises(WorkloadError) as e:
        plan_of(WINDOWS, **params)
    assert any(d.code == "WL401" and message in d.message for d in e.value.diagnostics)


def test_a_rate_of_zero_is_refused() -> None:
    with pytest.raises(WorkloadError) as e:
        plan_of(TURNS.replace(" in 0.01..", ""), rate="0")
    assert [d.code for d in e.value.diagnostics] == ["WL404"]
    assert "division by zero" in e.value.diagnostics[0].message
    with pytest.raises(WorkloadError) as e:
        plan_of(TURNS, rate="0")  # below the param's range
    assert e.value.diagnostics[0].code == "WL401"
