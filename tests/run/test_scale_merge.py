"""A sharded run's driver (`scale.driver.Merge`) when a worker is lost: what the worker had said
it sent and never recorded is a request sent with its outcome unknown (error kind `lost`), not
`skipped: not run`; what it never sent is not run; what it recorded is kept. And the worker's
side: a shard's executor says what it sends before any record of it (`shard.ShardShared`).
"""

from __future__ import annotations

from workloadlang import api
from workloadlang.results import ListSink
from workloadlang.run.record import skipped_record
from workloadlang.scale.driver import Merge
from workloadlang.scale.partition import partition
from workloadlang.scale.shard import joined

TEXT = 'workload w { session s repeat 2 { repeat 3 { user "x"; reply 4 } } }'


def plan_of(text: str = TEXT):
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, {}, salt="m")


def test_a_lost_workers_sent_requests_are_sent_with_an_unknown_outcome():
    """They were recorded as `skipped: not run`: sent, their outcome unknown, is different."""
    plan = plan_of()
    part = partition(plan, 2)
    sink = ListSink()
    merge = Merge(plan, part, sink)
    lost_worker = part.shard_of()["s#1"]
    first, second, third = [r for r in plan.requests if r.session == "s#1"]
    done = skipped_record(first, "stands for a record the worker sent")
    merge.item(lost_worker, ("sent", [(first.id, 100.0), (second.id, 101.5)]))
    merge.item(lost_worker, ("records", [done.model_dump(mode="json")]))
    merge.lost(lost_worker, "died (ActorDiedError: killed)")
    by_id = {r.id: r for r in sink.records}
    assert by_id[first.id].skipped == "stands for a record the worker sent"  # kept as it came
    lost = by_id[second.id]
    assert lost.skipped is None and lost.error.kind == "lost" and lost.t_send_unix == 101.5
    assert "worker" in lost.error.message and "outcome is unknown" in lost.error.message
    assert by_id[third.id].skipped == f"not run: worker {lost_worker} died (ActorDiedError: " \
        "killed)" and by_id[third.id].error is None
    assert {r.session for r in sink.records} == {"s#1"}  # the other worker's are its own


def test_sent_items_are_joined_like_records():
    items = [("sent", [("a", 1.0)]), ("sent", [("b", 2.0)]), ("records", [{"id": "a"}]),
             ("sent", [("c", 3.0)])]
    assert joined(items) == [("sent", [("a", 1.0), ("b", 2.0)]), ("records", [{"id": "a"}]),
                             ("sent", [("c", 3.0)])]
