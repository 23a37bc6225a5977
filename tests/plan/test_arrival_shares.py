"""What a plan of arrivals and caps promises: a request planned before any other request exists
can share nothing with it (`exp. max`), and the peak concurrent demand and the default
concurrency count at most a capped session's cap of its copies."""

from __future__ import annotations

from test_plan_semantics import plan_of

from workloadlang.plan.dryrun import render_plan

QA = """workload multi_round_qa {
  params { users: int = 3 }
  text doc = "Context:", filler 1k
  session user repeat $users arrive every 500ms {
    system $doc
    repeat 3 label round { user filler 50; reply 32; wait 100ms }
  }
}"""


def test_the_first_arrival_can_share_nothing_with_the_later_ones():
    plan = plan_of(QA)
    first = [r for r in plan.requests if r.index == 0]
    assert [r.send_at for r in first] == [0.0, 0.5, 1.0]
    assert [r.expected_cached_max for r in first] == [None, 1009, 1009]
    (note,) = [a for a in plan.assumptions if "share up to" in a]
    assert note.startswith("2 request(s) share up to 2,018 more tokens")
    assert "first: user#1/round/0" in note


def test_copies_that_arrive_together_share_nothing_at_their_start():
    plan = plan_of(QA.replace("arrive every 500ms", "arrive every 500ms burst 3"))
    assert [r.expected_cached_max for r in plan.requests if r.index == 0] == [None] * 3


def test_a_session_without_arrivals_can_leave_a_prefix_for_a_later_arrival():
    plan = plan_of(QA.replace("session user", """session early { system $doc; user "hi"; reply 4 }
  session user"""))
    first = [r for r in plan.requests if r.session.startswith("user") and r.index == 0]
    assert [r.expected_cached_max for r in first] == [None, 1009, 1009]  # 0.0s: nothing yet
    late = plan_of(QA.replace("session user", """session early { system $doc; user "hi"; reply 4 }
  session user""").replace("arrive every 500ms", "arrive at [0.2s, 0.5s, 1s]"))
    assert [r.expected_cached_max for r in late.requests
            if r.session.startswith("user") and r.index == 0] == [1009, 1009, 1009]


FLOOD = """workload flood {
  params { tenants: int = 12; cap: int = 8 }
  session victim { system "You are a helpful assistant."; repeat 3 { user filler 2k; reply 16 } }
  session tenant repeat $tenants arrive every 10ms concurrency $cap {
    user filler 3k; reply 8
  }
}"""


def test_peak_demand_and_concurrency_count_at_most_the_cap_of_a_capped_session():
    plan = plan_of(FLOOD)
    assert plan.concurrency == 9  # the victim and 8 tenants, not 13
    tenant = 3000 + 7 + 8
    victim = max(r.prompt_tokens + r.max_tokens for r in plan.requests if r.session == "victim#0")
    assert plan.totals.peak_inflight_tokens == victim + 8 * tenant
    text = render_plan(plan)
    assert f"peak concurrent demand       {victim + 8 * tenant:,} tokens (9 in flight)" in text


def test_a_cap_above_the_copies_and_a_set_concurrency_change_nothing_else():
    plan = plan_of(FLOOD, params={"cap": 20})
    assert plan.concurrency == 13
    plan = plan_of(FLOOD.replace("session victim", "concurrency = 4\n  session victim"))
    assert plan.concurrency == 4 and "(4 in flight)" in render_plan(plan)
    plan = plan_of(FLOOD.replace("session victim", "concurrency = 20\n  session victim"))
    assert plan.concurrency == 20 and "(9 in flight)" in render_plan(plan)
