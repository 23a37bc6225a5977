"""A sharded run's driver and workers (workloadlang.scale.driver, shard) with the workers as
tasks of one event loop (tests/scalehelp.py), against the simulator in its own process: the
same requests, cache evidence and verdicts as one process; run-wide barriers, isolation,
concurrency and start; a lost worker's sessions recorded as not run. The same through Ray
workers: tests/e2e/test_scale_ray.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from workloadlang import api
from workloadlang.results import ExitCode, ListSink
from workloadlang.scale.driver import run_sharded
from workloadlang.sim import PRESETS
from workloadlang.sim.server import start_in_process

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

try:
    from scalehelp import backend_for
except ImportError:  # tests/ turned into a package
    from tests.scalehelp import backend_for


TRACE = str(Path(__file__).resolve().parents[1] / "data/mooncake/conversation_1000.jsonl")
SMALL = {"sessions": "2", "main_tokens": "20k", "step_tokens": "5k", "sub_tokens": "4k",
         "finalize_tokens": "1k"}


def plan_for(engine: Any, params: dict[str, str], salt: str = "shard"):
    source = api.load("agent-sim")
    return api.make_plan(api.parse_checked(source), source, params, salt=salt,
                         env={"max_context": engine.info.max_context})


async def one_run(params: dict[str, str], workers: int | None, fail=None):
    """A fresh simulator (agent-sim preset), the plan, one run: in one process (`workers`
    None) or sharded. Output: (results, sink)."""
    with start_in_process(PRESETS["agent-sim"]) as sim:
        async with api.open_engine(sim.base_url, sim=True) as engine:
            plan = plan_for(engine, params)
            sink = ListSink()
            if workers is None:
                return await api.run_workload(plan, engine, sink), sink
            return await run_sharded(plan, engine, sink, backend_for(fail), workers=workers), sink


def evidence(results) -> list[tuple]:
    return [(r.id, r.session, r.planned_prompt_tokens, r.prompt_tokens, r.cached_tokens,
             r.planned_expected_cached, r.expected_cached, r.hit, r.skipped, r.error)
            for r in results.records]


def judged(results) -> list[tuple]:
    """Each gate's outcome per scope (the verdicts; values may hold timings)."""
    return [(g.name, g.status, [(r.scope, r.status) for r in g.results]) for g in results.gates]


@pytest.fixture(scope="module")
def single_and_sharded():
    return asyncio.run(one_run(SMALL, None)), asyncio.run(one_run(SMALL, 2))


def test_same_plan_requests_evidence_and_verdicts(single_and_sharded):
    (one, _), (two, sink) = single_and_sharded
    assert two.plan_hash == one.plan_hash
    assert evidence(two) == evidence(one)
    assert two.verdicts == one.verdicts == {"main#0": "ok", "main#1": "ok"}
    assert two.exit_code == one.exit_code == ExitCode.OK
    assert judged(two) == judged(one)
    # every record went to the sink as it came, each once
    assert sorted(r.id for r in sink.records) == sorted(r.id for r in one.records)


def test_each_worker_held_its_session_and_reported_its_health(single_and_sharded):
    (one, _), (two, sink) = single_and_sharded
    workers = two.client.workers or []
    assert [w.sessions for w in workers] == [["main#0"], ["main#1"]]
    assert [w.concurrency for w in workers] == [1, 1]
    for w in workers:
        mine = [r for r in two.records if r.session in w.sessions]
        assert w.records == len(mine) == 16 and w.incomplete is None
        assert abs(w.clock_offset_s or 0.0) < 0.01 and (w.clock_offset_error_s or 0.0) < 0.01
        assert {"loop_lag_p99_ms", "client_bottleneck"} <= w.model_fields_set
    assert two.client.isolated_requests == sum(w.isolated_requests or 0 for w in workers)
    for run in (one, two):  # the plan's 20, and a measurement sent again alone on a busy host
        assert sum(1 for r in run.records if r.isolated) == 20
        assert 20 <= (run.client.isolated_requests or 0) <= 20 + (run.client.remeasures or 0), \
            run.client
    assert [e for e, _ in sink.events].count("worker") == 2


def phases_and_isolation_hold(results) -> None:
    """Every session's main turns end before any finalize starts, every finalize before any
    session's measure phase (the barriers), and no isolated request overlaps another request
    of the run, whichever worker sent it."""
    sent = [r for r in results.records if r.t_start_s is not None]
    end = lambda r: r.t_start_s + r.e2e_s  # noqa: E731
    back_end = max(end(r) for r in sent if r.phase == "back")
    measure_start = min(r.t_start_s for r in sent if r.phase == "measure")
    main_end = max(end(r) for r in sent if r.phase == "")
    back_start = min(r.t_start_s for r in sent if r.phase == "back")
    assert main_end <= back_start and back_end <= measure_start
    for r in sent:
        if not r.isolated:
            continue
        others = [o for o in sent if o.id != r.id and o.t_start_s < end(r) and end(o) > r.t_start_s]
        assert not others, (r.id, [o.id for o in others])


def test_phases_and_isolation_hold_across_workers(single_and_sharded):
    _, (two, _) = single_and_sharded
    phases_and_isolation_hold(two)


def test_uneven_workers_keep_the_limit_the_barriers_and_the_isolation():
    """3 sessions, concurrency 2, two workers: the limit is split 1 + 1 (a worker's share of the
    sessions, at least 1 each), and the run never has more than 2 requests in flight. The
    worker with two sessions on one slot is the slower: the other waits for it at each
    barrier."""
    params = {**SMALL, "sessions": "3", "max_concurrency": "2"}
    results, _ = asyncio.run(one_run(params, 2))
    assert [w.concurrency for w in results.client.workers or []] in ([1, 1],)
    spans = sorted((r.t_start_s, r.t_start_s + r.e2e_s) for r in results.records
                   if r.t_start_s is not None)
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    most = level = 0
    for _, step in events:
        level += step
        most = max(most, level)
    assert most <= 2
    phases_and_isolation_hold(results)
    assert results.exit_code == ExitCode.OK


def test_a_lost_worker_is_reported_with_its_sessions_and_what_completed_is_kept():
    results, sink = asyncio.run(one_run(SMALL, 2, fail={1: (3, RuntimeError("gone"))}))
    assert results.exit_code == ExitCode.INCOMPLETE
    assert "worker 1 failed (RuntimeError: gone)" in results.incomplete
    assert "main#1" in results.incomplete
    lost = [r for r in results.records if r.session == "main#1"]
    kept = [r for r in lost if r.skipped is None]
    assert len(kept) >= 3  # what it completed before it was lost
    assert all(r.skipped.startswith("not run: worker 1 failed") for r in lost if r.skipped)
    assert len(results.records) == 32
    assert {r.session for r in results.records if r.skipped is None} >= {"main#0"}
    assert all(r.skipped is None for r in results.records if r.session == "main#0")
    assert [w.lost or "" for w in results.client.workers or []][1].startswith("failed")
    assert ("worker_lost", {"worker": 1, "reason": "failed (RuntimeError: gone)",
                            "sessions": ["main#1"]}) in sink.events


def test_planned_send_times_hold_on_the_driver_clock_across_workers():
    """A trace's requests (planned send times from one start) split over two workers: none is
    sent before its time on the run's clock."""
    params = {"trace": TRACE, "limit": "30",
              "time_scale": "0.05", "block_tokens": "16", "max_tokens": "4"}

    async def main():
        with start_in_process(PRESETS["default"]) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                source = api.load("mooncake")
                plan = api.make_plan(api.parse_checked(source), source, params, salt="t",
                                     env={"max_context": engine.info.max_context})
                return await run_sharded(plan, engine, ListSink(), backend_for(), workers=2)

    results = asyncio.run(main())
    assert results.exit_code == ExitCode.OK
    assert len(results.client.workers or []) == 2
    sent = [r for r in results.records if r.t_start_s is not None]
    assert len(sent) == 30 and len({r.planned_send_at for r in sent}) == 4
    error = max((w.clock_offset_error_s or 0.0) for w in results.client.workers or [])
    for r in sent:
        assert r.t_start_s >= r.planned_send_at - error, (r.id, r.t_start_s, r.planned_send_at)


def test_an_interrupted_run_keeps_what_was_measured_and_exits_130():
    """Ctrl-C (the run's task cancelled) stops every worker: what they measured comes back and
    is judged; no worker counts as lost."""

    async def main():
        with start_in_process(PRESETS["agent-sim"]) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                plan = plan_for(engine, SMALL)
                sink = ListSink()
                task = asyncio.ensure_future(run_sharded(plan, engine, sink, backend_for(),
                                                         workers=2))
                while len(sink.records) < 6:
                    await asyncio.sleep(0.005)
                task.cancel()
                return await task, sink

    results, sink = asyncio.run(main())
    assert results.exit_code == ExitCode.INTERRUPTED and results.incomplete == "interrupted"
    assert len(results.records) == 32  # every planned request has its record
    assert sum(r.skipped is None and r.error is None for r in results.records) >= 6
    assert all(not w.lost for w in results.client.workers or [])
    assert all(w.incomplete == "interrupted" for w in results.client.workers or [])


def test_a_failed_coordinator_stops_the_run_and_keeps_what_was_measured():
    """The coordinator fails at the barrier before the measure phase: the workers, waiting
    there, are stopped; the run is incomplete (exit 4) and says why; every request has its
    record and nothing of the measure phase was sent."""

    async def main():
        with start_in_process(PRESETS["agent-sim"]) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                plan = plan_for(engine, SMALL)
                return await run_sharded(plan, engine, ListSink(), backend_for(broken=2),
                                         workers=2)

    results = asyncio.run(main())
    assert results.exit_code == ExitCode.INCOMPLETE
    assert results.incomplete.startswith("the run's coordinator failed (ConnectionError: ")
    assert len(results.records) == 32
    assert all(r.t_start_s is None for r in results.records if r.phase == "measure")
    assert all(r.skipped is None for r in results.records if r.phase != "measure")


def test_a_worker_says_what_it_sends_before_its_records(monkeypatch):
    """The driver learns of every request a worker writes before the request's record (a
    worker lost between the two leaves it sent with its outcome unknown: test_scale_merge)."""
    from workloadlang.scale import driver

    seen: list[tuple[int, str, str]] = []
    item = driver.Merge.item

    def spy(self, worker: int, it: tuple) -> None:
        if it[0] == "sent":
            seen.extend((worker, "sent", rid) for rid, _ in it[1])
        elif it[0] == "records":
            seen.extend((worker, "record", r["id"]) for r in it[1])
        item(self, worker, it)

    monkeypatch.setattr(driver.Merge, "item", spy)
    results, _ = asyncio.run(one_run(SMALL, 2))
    sent = [rid for _, kind, rid in seen if kind == "sent"]
    assert sorted(sent) == sorted(r.id for r in results.records if r.skipped is None)
    for rid in sent:
        assert seen.index(next(s for s in seen if s[2] == rid and s[1] == "sent")) < \
            seen.index(next(s for s in seen if s[2] == rid and s[1] == "record"))
