"""A plan partitioned by session (workloadlang.scale.partition): sessions never split, linked
sessions stay together, the concurrency limit is split exactly, the load is balanced."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloadlang import api
from workloadlang.plan.model import Seg
from workloadlang.scale.partition import (
    partition,
    session_groups,
    shard_plan,
    split_concurrency,
)

TRACE = str(Path(__file__).resolve().parents[1] / "data/mooncake/conversation_1000.jsonl")


def plan_of(name: str, **params: str):
    source = api.load(name)
    return api.make_plan(api.parse_checked(source), source, params, salt="part",
                         env={"max_context": 1_000_000})


def test_agent_sim_two_workers_one_session_each_and_its_slot():
    plan = plan_of("agent-sim", sessions="2", main_tokens="20k", sub_tokens="4k")
    part = partition(plan, 2)
    assert [sh.sessions for sh in part.shards] == [("main#0",), ("main#1",)]
    assert [sh.concurrency for sh in part.shards] == [1, 1]
    assert sum(sh.requests for sh in part.shards) == len(plan.requests)
    assert part.notes == ()


def test_every_request_in_exactly_one_shard_and_sessions_whole():
    plan = plan_of("agent-sim", sessions="5", main_tokens="20k", sub_tokens="4k")
    part = partition(plan, 3)
    shards = [shard_plan(plan, sh) for sh in part.shards]
    ids = [r.id for p in shards for r in p.requests]
    assert sorted(ids) == sorted(r.id for r in plan.requests)
    where = part.shard_of()
    for r in plan.requests:
        assert r.session in {s.id for s in shards[where[r.session]].sessions}
    # the shard plan is the whole plan's identity: its records are the whole run's
    assert {p.plan_hash for p in shards} == {plan.plan_hash}
    assert [p.concurrency for p in shards] == [sh.concurrency for sh in part.shards]


def test_balanced_by_load_heaviest_first():
    plan = plan_of("agent-sim", sessions="4", main_tokens="20k", sub_tokens="4k")
    part = partition(plan, 2)
    assert [len(sh.sessions) for sh in part.shards] == [2, 2]
    assert part.shards[0].prompt_tokens == part.shards[1].prompt_tokens


def test_fewer_workers_when_the_limit_or_the_sessions_are_fewer():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k",
                   max_concurrency="2")
    part = partition(plan, 4)
    assert len(part.shards) == 2
    assert "concurrency 2" in part.notes[0] and "3 group(s)" in part.notes[0]
    assert sum(sh.concurrency for sh in part.shards) == 2


def test_fail_fast_keeps_every_session_on_one_worker():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k")
    plan = plan.model_copy(update={"fail_fast": True})
    part = partition(plan, 2)
    assert [sh.sessions for sh in part.shards] == [("main#0", "main#1", "main#2")]
    assert "fail-fast" in part.notes[0]


def test_a_dependency_on_another_session_keeps_both_together():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k")
    reqs = list(plan.requests)
    i = next(i for i, r in enumerate(reqs) if r.session == "main#2")
    other = next(r for r in reqs if r.session == "main#0")
    reqs[i] = reqs[i].model_copy(update={"deps": (*reqs[i].deps, other.id)})
    linked = plan.model_copy(update={"requests": tuple(reqs)})
    assert session_groups(linked) == [["main#0", "main#2"], ["main#1"]]
    part = partition(linked, 2)
    assert sorted(sh.sessions for sh in part.shards) == [("main#0", "main#2"), ("main#1",)]


def test_a_carried_reply_of_another_session_keeps_both_together():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k")
    last = next(r for r in plan.requests if r.session == "main#1").last_message
    donor = next(r for r in plan.requests if r.session == "main#2")
    msgs = list(plan.messages)
    m = msgs[last]
    msgs[last] = m.model_copy(update={"segs": (*m.segs, Seg(kind="reply", tokens=5,
                                                            key=donor.id))})
    linked = plan.model_copy(update={"messages": tuple(msgs)})
    assert session_groups(linked) == [["main#0"], ["main#1", "main#2"]]


def test_a_loop_spanning_sessions_keeps_them_together():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k")
    reqs = [r.model_copy(update={"stop_group": "g"}) if r.session != "main#1" and r.index == 0
            and r.label == "main" else r for r in plan.requests]
    linked = plan.model_copy(update={"requests": tuple(reqs)})
    assert session_groups(linked) == [["main#0", "main#2"], ["main#1"]]


def test_bundled_workloads_partition_without_losing_a_request():
    for name, params in (("cache-pressure", {"kv_size": "64k"}), ("needle-test", {}),
                         ("abort-sim", {}), ("perf-sim", {}),
                         ("mooncake", {"trace": TRACE, "limit": "200"})):
        plan = plan_of(name, **params)
        part = partition(plan, 2)
        assert sum(sh.requests for sh in part.shards) == len(plan.requests), name
        assert sum(sh.concurrency for sh in part.shards) == plan.concurrency, name
        assert len({s for sh in part.shards for s in sh.sessions}) == len(plan.sessions), name


@given(limit=st.integers(1, 300), sessions=st.lists(st.integers(1, 50), min_size=1,
                                                    max_size=12))
def test_split_concurrency_adds_up_and_gives_each_a_slot(limit, sessions):
    if len(sessions) > limit:
        with pytest.raises(ValueError):
            split_concurrency(limit, sessions)
        return
    out = split_concurrency(limit, sessions)
    assert sum(out) == limit and min(out) >= 1
    quota = [limit * s / sum(sessions) for s in sessions]
    for i in range(len(out)):
        for j in range(len(out)):
            if sessions[i] > sessions[j]:
                assert out[i] >= out[j]  # more sessions, never fewer slots
        if min(quota) >= 1:
            assert abs(out[i] - quota[i]) < 1  # the share, to a slot


def test_split_concurrency_examples():
    assert split_concurrency(2, [1, 1]) == [1, 1]
    assert split_concurrency(8, [3, 1]) == [6, 2]
    assert split_concurrency(3, [1, 1]) == [2, 1]
    assert split_concurrency(3, [5, 0, 0]) == [1, 1, 1]


def test_a_reply_carried_in_a_tool_calls_arguments_keeps_both_together():
    plan = plan_of("agent-sim", sessions="3", main_tokens="20k", sub_tokens="4k")
    last = next(r for r in plan.requests if r.session == "main#0").last_message
    donor = next(r for r in plan.requests if r.session == "main#1")
    msgs = list(plan.messages)
    call = Seg(kind="call", tokens=9, key="call-1", text="lookup",
               args=(("q", Seg(kind="reply", tokens=5, key=donor.id)),))
    msgs[last] = msgs[last].model_copy(update={"segs": (*msgs[last].segs, call)})
    linked = plan.model_copy(update={"messages": tuple(msgs)})
    assert session_groups(linked) == [["main#0", "main#1"], ["main#2"]]


def test_a_parallel_fork_stays_in_its_session():
    """`spawn N parallel` (branches in flight together, `keep first`) is one session's."""
    text = """
workload forks {
  concurrency = 4
  session main repeat 2 {
    user filler 1k
    reply 8
    spawn 2 fork parallel keep first label branch { user filler 200; reply 8 }
    user "go on"
    reply 8
  }
}
"""
    source = api.Source(name="forks.wl", text=text)
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="f",
                         env={"max_context": 100_000})
    assert plan.picks and {r.lane for r in plan.requests} > {""}  # branches in flight together
    part = partition(plan, 2)
    assert [sh.sessions for sh in part.shards] == [("main#0",), ("main#1",)]
    assert [sh.concurrency for sh in part.shards] == [2, 2]


def test_the_limit_follows_the_sessions_that_run_branches_in_parallel():
    """Of 3 sessions, one runs 3 branches at once (its nested forks of 2 make 6 leaves): with
    concurrency 8 on 2 workers, its worker gets the larger share."""
    text = """
workload wide {
  concurrency = 8
  session wide {
    user filler 1k
    reply 8
    spawn 3 fork parallel label b {
      user filler 200
      reply 8
      spawn 2 fork parallel { user "x"; reply 4 }
    }
  }
  session narrow repeat 2 { user filler 1k; reply 8; user filler 1k; reply 8 }
}
"""
    source = api.Source(name="wide.wl", text=text)
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="w",
                         env={"max_context": 100_000})
    part = partition(plan, 2)
    by = {sh.sessions: sh.concurrency for sh in part.shards}
    assert by == {("wide#0",): 6, ("narrow#0", "narrow#1"): 2}


def test_the_copies_of_a_capped_session_stay_on_one_worker():
    """A session's `concurrency` cap counts its copies running on one executor: they are not
    split across workers (which would let each run up to the cap)."""
    source = api.Source(name="t.wl", text="""workload w {
      session tenant repeat 4 arrive every 100ms concurrency 2 { user "x"; reply 4 }
      session free repeat 4 { user "y"; reply 4 }
    }""")
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="part")
    groups = session_groups(plan)
    assert ["tenant#0", "tenant#1", "tenant#2", "tenant#3"] in groups
    assert ["free#0"] in groups and len(groups) == 5
