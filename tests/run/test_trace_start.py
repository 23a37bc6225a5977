"""A trace that starts at once: its requests made as the schedule goes, in bounded memory.

Input: a workloadlang trace file written here (one request due at once, the rest far ahead) and
the committed Mooncake slice. Output checked: a request due far ahead is not made (realised,
encoded, held) until shortly before its time; the realiser keeps at most its byte budget of
made text, and a message made again is the same bytes; side calls leave the run's connections
alone.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from workloadlang import api
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run.endpoint import Endpoint, dumps_kept
from workloadlang.run.executor import MAKE_AHEAD_S, Executor
from workloadlang.run.pacing import InTurn

SLICE = Path(__file__).parents[1] / "data" / "mooncake" / "conversation_1000.jsonl"


def trace_plan(path: Path, **params: str):
    source = api.load("mooncake")
    return api.make_plan(api.parse_checked(source), source, {"trace": str(path), **params},
                         salt="start")


class Recording(InTurn):
    """The in-turn pacing, noting each request made ahead (`prepare`)."""

    def __init__(self) -> None:
        super().__init__(transport=None)
        self.prepared: list[str] = []
        self.sending = asyncio.Event()

    def prepare(self, req) -> None:
        self.prepared.append(req.id)

    async def send(self, req, after, on_cancel):
        self.sending.set()
        await asyncio.sleep(3600)  # never answered: the test stops the run


def test_a_request_due_far_ahead_is_not_made_at_the_start(tmp_path: Path):
    lines = [{"trace": "workloadlang", "version": 1, "block_tokens": 16},
             {"t": 0, "input_tokens": 32, "output_tokens": 4}]
    lines += [{"t": 1000 + k, "input_tokens": 32, "output_tokens": 4} for k in range(50)]
    path = tmp_path / "far.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    plan = trace_plan(path)

    async def go() -> Recording:
        pacing = Recording()
        executor = Executor(plan, Realiser(plan, RatioSizer()), pacing,
                            Endpoint(base_url="http://engine/v1", model="m"), ListSink())
        task = asyncio.ensure_future(executor.run())
        await asyncio.wait_for(pacing.sending.wait(), 60)  # the first request is in flight
        await asyncio.sleep(0.05)  # every other request's task has run up to its wait
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pacing

    pacing = asyncio.run(go())
    far = [r.id for r in plan.requests if r.send_at >= 1000]
    assert len(far) == 50 and not set(pacing.prepared) & set(far)
    assert MAKE_AHEAD_S < 1000


def test_the_realiser_keeps_at_most_its_budget_and_makes_the_same_bytes_again():
    plan = trace_plan(SLICE, limit="120")
    budget = 400_000
    small = Realiser(plan, RatioSizer(), kept_bytes=budget)
    whole = Realiser(plan, RatioSizer())
    largest = 0
    for req in plan.requests:
        got = small.encoded(req, {}, dumps_kept)
        largest = max(largest, sum(len(b) for b in got))
        assert small._kept_bytes <= budget + 2 * largest  # the newest message is always kept
        assert got == whole.encoded(req, {}, dumps_kept)
    assert whole._kept_bytes > 10 * budget  # unbounded, it would have kept them all
    first = plan.requests[0]  # long dropped from the small one: made again, the same
    assert small.encoded(first, {}, dumps_kept) == whole.encoded(first, {}, dumps_kept)


SIDE_WL = """workload side {
  params { sessions: int = 8 }
  concurrency = $sessions
  session s repeat $sessions { repeat 3 { user filler 300; reply 4 } }
}
"""


def test_side_calls_use_connections_of_their_own_and_a_few_tokenizer_calls():
    """Discovery, the tokenizer and the counters go through the link's side client (a wire
    pool of its own, read on the loop), never through the run's pool; sizing 24 fillers asks
    the tokenizer only what checking its vocabulary took."""
    from workloadlang.run.side import WireSide
    from workloadlang.sim import SimConfig, start_in_thread

    async def go():
        with start_in_thread(SimConfig(prefill_us_per_token=1)) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                source = api.Source(name="side.wl", text=SIDE_WL)
                plan = api.make_plan(api.parse_checked(source), source, {}, salt="side",
                                     env={"max_context": engine.info.max_context})
                results = await api.run_workload(plan, engine, ListSink())
                return engine, results

    engine, results = asyncio.run(go())
    assert all(r.error is None for r in results.records) and len(results.records) == 24
    assert isinstance(engine.side, WireSide) and engine.side.pool is not engine.pool
    # /models, /props, the tokenizer's probe and its checks, /metrics at the start and end
    assert engine.side.calls >= 6 and engine.side.pool.connects >= 1
    assert engine.tokenizer.calls <= 5 and results.calibration.sizing == "vocabulary"
    assert engine.pool.connects <= 8 + 2  # the run's own: one a session, calibration's


def test_requests_queued_for_a_slot_when_the_budget_runs_out_are_not_sent():
    """At concurrency 1, five sessions' first requests queue for the one slot; the first is
    never answered and the budget runs out: the four queued are recorded as not sent (the
    budget), not all sent at once with no time left."""
    from runexec import execute, plan_of

    plan = plan_of("""workload q {
      concurrency = 1
      session s repeat 5 { user "hi"; reply 4 }
    }""")

    async def never(request):
        await asyncio.sleep(30)

    run, executor = execute(plan, never, ahead=False, time_budget_s=0.3)
    first, *queued = run.records
    assert first.error is not None and first.t_send_unix
    assert len(queued) == 4
    assert all(r.skipped == "time budget exhausted" and r.t_send_unix is None for r in queued)


def test_a_trace_sent_as_fast_as_it_can_makes_few_requests_before_the_clock():
    """At --time-scale 0 every record is a session's first request due at the start: only as
    many are made before the clock as the start can use, not the whole trace."""
    from workloadlang.run.ahead import _START_MADE, WriteAhead

    plan = trace_plan(SLICE, time_scale="0", limit="400", max_concurrency="4")
    made: list[str] = []

    class Pool:  # connections are not what is looked at here
        async def preconnect(self, url: str, n: int) -> int:
            return 0

        def claim(self, url: str, n: int) -> None:
            return None

    class Core:
        concurrency = plan.concurrency
        endpoint = Endpoint(base_url="http://engine/v1", model="m")

    pacing = WriteAhead(Pool())
    pacing.bind(Core())
    pacing.prepare = made.append  # what before_clock makes ahead (the request)
    assert len(plan.requests) == 400 > _START_MADE
    asyncio.run(pacing.before_clock(list(plan.requests)))
    assert [r.id for r in made] == [r.id for r in plan.requests[:_START_MADE]]
