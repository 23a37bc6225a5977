"""The API's front door for running: `open_engine` + `run_workload` (what `wl run` calls), and
the options a distributed run's workers need: a shard of the sessions, a common start instant,
measuring without judging.

Input: a small workload run against the simulator in a thread. Output checked: the results'
records, gates and exit code, the events the sink got, and that a shard runs exactly its
sessions and starts at the instant asked for."""

from __future__ import annotations

import asyncio
import time

from workloadlang import api
from workloadlang.results import ExitCode, ListSink
from workloadlang.sim import SimConfig, start_in_thread

WL = """
workload front {
  params { sessions: int = 3 }
  session s repeat $sessions {
    turn a { user filler 200; reply 4 }
    turn b isolated { user filler 50; reply 4 }
  }
  gates { hits: overall reuse{b} >= 90% }
}
"""


def plan_for(engine) -> api.Plan:
    source = api.Source(name="front.wl", text=WL)
    return api.make_plan(api.parse_checked(source), source, {}, salt="front",
                         env={"max_context": engine.info.max_context})


def test_run_workload_runs_a_plan_judges_it_and_gives_the_sink_every_record() -> None:
    async def go():
        with start_in_thread(SimConfig(prefill_us_per_token=1)) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                plan = plan_for(engine)
                sink = ListSink()
                return plan, sink, await api.run_workload(plan, engine, sink)

    plan, sink, results = asyncio.run(go())
    assert [r.id for r in results.records] == [r.id for r in plan.requests]
    assert sorted(r.id for r in sink.records) == sorted(r.id for r in plan.requests)
    assert all(r.error is None and not r.skipped for r in results.records)
    assert results.plan_hash == plan.plan_hash and results.exit_code == ExitCode.OK
    assert [g.name for g in results.gates] == ["hits"] and results.gates[0].passed
    kinds = [k for k, _ in sink.events]
    assert kinds[0] == "plan" and "calibration" in kinds and kinds[-1] == "summary"


def test_a_shard_runs_only_its_sessions_from_the_start_instant_and_is_not_judged() -> None:
    async def go():
        with start_in_thread(SimConfig(prefill_us_per_token=1)) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                plan = plan_for(engine)
                shard = frozenset(r.session for r in plan.requests[-2:])
                start = time.time() + 0.5
                options = api.RunOptions(sessions=shard, start_at_unix=start)
                measured = await api.measure_workload(plan, engine, ListSink(), options)
                return plan, shard, start, measured

    plan, shard, start, measured = asyncio.run(go())
    assert len(shard) == 1
    assert [r.id for r in measured.records] == [r.id for r in plan.requests
                                                 if r.session in shard]
    first = min(r.t_send_unix for r in measured.records)
    assert start <= first < start + 0.25  # sent at the common start, not before it
    assert measured.incomplete is None and not measured.interrupted


def test_without_isolation_the_requests_marked_isolated_go_with_the_others() -> None:
    async def go(isolation: bool):
        with start_in_thread(SimConfig(prefill_us_per_token=1)) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                plan = plan_for(engine)
                options = api.RunOptions(isolation=isolation)
                return await api.run_workload(plan, engine, None, options)

    marked = {r.id for r in asyncio.run(go(True)).records if r.isolated}
    assert marked and all(i.endswith(("/b/0",)) for i in marked)
    assert not any(r.isolated for r in asyncio.run(go(False)).records)
