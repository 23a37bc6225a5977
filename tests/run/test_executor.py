"""The executor's core over both pacings: every filler sized before the run starts (no tokenizer
call competes with measured requests), the client's own delay measured from when a request was
due, records reaching the sink in order, and a failing sink stopping the run."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from runexec import SSE, answer, execute, plan_of
from workloadlang.plan.realise import Realiser
from workloadlang.results import ListSink

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

WORKLOAD = """
workload sizing {
  session s repeat 2 {
    repeat 3 label step { fresh { user filler 300; reply 4 } }
  }
}
"""

@pytest.mark.parametrize("ahead", [True, False], ids=["write-ahead", "in-turn"])
def test_every_request_is_sized_before_the_first_send(ahead: bool) -> None:
    plan = plan_of(WORKLOAD)
    log: list[tuple[str, int]] = []
    inflight = [0]

    async def count(text: str) -> int:
        log.append(("count", inflight[0]))
        return len(text.split())  # one token per word: the first guess is exact

    async def chat(request: httpx.Request) -> httpx.Response:
        inflight[0] += 1
        log.append(("chat", inflight[0]))
        await asyncio.sleep(0.01)  # in flight: the next request's sizing would run now
        inflight[0] -= 1
        return answer()

    records = execute(plan, chat, count=count, ahead=ahead)[0].records
    assert [r.error for r in records] == [None] * 6
    counts = [n for kind, n in log if kind == "count"]
    assert len(counts) == 6  # one exact tokenizer call per filler
    first_chat = next(i for i, (kind, _) in enumerate(log) if kind == "chat")
    assert [k for k, _ in log[:first_chat]] == ["count"] * 6  # no tokenizer call during the run
    assert all(n == 0 for n in counts)


def test_client_delay_counts_work_between_an_answer_and_the_next_send(monkeypatch) -> None:
    """Work between an answer's end and the next send (here a realiser taking 50 ms per
    request, as a huge context would, with no quiet moment to make it ahead) is client delay:
    it is measured from the answer's end, so it shows. The first requests, made before the
    clock, carry none of it."""
    import time

    from workloadlang.run import ahead as ahead_mod

    monkeypatch.setattr(ahead_mod, "_QUIET_S", 60.0)  # nothing is made at a quiet moment
    monkeypatch.setattr(ahead_mod, "_DEFER_MAX_S", 60.0)
    plan = plan_of(WORKLOAD.replace("repeat 2", "repeat 1"))

    class SlowRealiser(Realiser):
        def encoded(self, req: Any, replies: Any, encode: Any) -> list[Any]:
            time.sleep(0.05)
            return super().encoded(req, replies, encode)

    run, executor = execute(plan, realiser=SlowRealiser)
    health, delays = run.client, executor.health.delays
    assert len(delays) == 3
    assert delays[0] < 0.045  # made before the clock
    assert min(delays[1:]) >= 0.045
    assert health["client_delay_max_ms"] >= 45
    assert health["client_delay_over_10ms"] == 2  # the two made on the clock
    assert health["client_bottleneck"] is True


def test_nothing_is_loaded_on_the_clock_by_the_first_request() -> None:
    """anyio's asyncio backend is imported on the first cancel scope (~30 ms). In a fresh
    interpreter it must already be loaded when the first request is sent, or every session's
    first request counts that import as client delay (and a small run reports a bottleneck)."""
    import subprocess
    import sys

    script = f"""
import asyncio, sys
import httpx
from workloadlang import api
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run import pacing
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.executor import Executor
from workloadlang.wire import HttpxTransport
seen = []
real_send = pacing.send
async def send(*a, **k):
    seen.append("anyio._backends._asyncio" in sys.modules)
    return await real_send(*a, **k)
pacing.send = send
SSE = {SSE!r}
source = api.Source(name="w.wl", text={WORKLOAD.replace("repeat 2", "repeat 1")!r})
plan = api.make_plan(api.parse_checked(source), source, {{}}, salt="t", env={{"max_context": 65536}})
def chat(request):
    return httpx.Response(200, content=SSE, headers={{"content-type": "text/event-stream"}})
async def go():
    transport = HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(chat)))
    await Executor(plan, Realiser(plan, RatioSizer(1.0)), pacing.InTurn(transport),
                   Endpoint(base_url="http://engine/v1", model="m"), ListSink()).run()
asyncio.run(go())
print(seen[0])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("ahead", [True, False], ids=["write-ahead", "in-turn"])
def test_records_reach_the_sink_in_order_and_a_failing_sink_stops_the_run(ahead: bool) -> None:
    """Every record arrives, in completion order, before `run` returns (with the latency pacing,
    on a loop pass after its session's next request is written); a sink that fails (a full
    disk) stops the run with its error."""
    plan = plan_of(WORKLOAD)

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.005)
        return answer()

    class FailingSink(ListSink):
        def record(self, rec: Any) -> None:
            if len(self.records) == 2:
                raise OSError("No space left on device")
            super().record(rec)

    sink = ListSink()
    run, executor = execute(plan, chat, sink=sink, ahead=ahead)
    assert sorted(r.id for r in sink.records) == sorted(r.id for r in run.records)
    ends = [executor.outcomes[r.id].t_send + executor.outcomes[r.id].e2e_s for r in sink.records]
    assert ends == sorted(ends)
    with pytest.raises(OSError, match="No space"):
        execute(plan, chat, sink=FailingSink(), ahead=ahead)


def test_the_run_keeps_its_results_out_of_the_collectors_scans(monkeypatch) -> None:
    """Before the clock and then every few records, what the run keeps is frozen (no collection
    walks all of the run's results); afterwards nothing stays frozen."""
    import gc

    from workloadlang.run import health as health_mod

    monkeypatch.setattr(health_mod, "_FREEZE_EVERY", 2)
    plan = plan_of(WORKLOAD)
    grew: list[bool] = []
    real_freeze = gc.freeze

    def freeze() -> None:
        before = gc.get_freeze_count()
        real_freeze()
        grew.append(gc.get_freeze_count() > before)

    monkeypatch.setattr(gc, "freeze", freeze)

    records = execute(plan)[0].records
    assert len(records) == 6
    assert grew == [True] * 4  # before the clock, then after records 2, 4 and 6
    assert gc.get_freeze_count() == 0


def test_the_worst_delay_says_when_and_how_many_sends_went_first() -> None:
    """Making a session's second request takes 20 ms of the injected clock (nothing else
    moves it). The mock engine answers within the send, so the three sessions' tasks run one
    after the other: the last session's first request waits from the run's start while the
    client makes and sends the second request of each session before it (the first of the
    second session goes out with no making). It is the most delayed (40 ms), and the results
    say when it was sent and that two other sends went out meanwhile: a burst's turnarounds,
    not a stall (which would show none)."""
    now = [100.0]
    plan = plan_of("""workload w { session s repeat 3 {
        user filler 10; reply 4 replay; user filler 10; reply 4 } }""")

    class SlowRealiser(Realiser):
        def encoded(self, req: Any, replies: Any, encode: Any) -> list[Any]:
            if len(self.plan.message_ids(req)) > 1:  # a session's second request
                now[0] += 0.02
            return super().encoded(req, replies, encode)

    run, executor = execute(plan, realiser=SlowRealiser, clock=lambda: now[0], ahead=False)
    health = run.client
    assert [r.error for r in run.records] == [None] * 6
    sent = {o.id: round(o.t_send - 100.0, 3) for o in executor.outcomes.values()}
    assert sent["s#2/reply/0"] == 0.04 and sent["s#0/reply/0.1"] == sent["s#1/reply/0"] == 0.02
    assert health["client_delay_max_ms"] == pytest.approx(40)
    assert health["client_delay_max_sends_meanwhile"] == 2
    assert health["client_delay_max_at_s"] == pytest.approx(0.04)
    assert health["client_delay_max_gc_ms"] == 0.0  # the clock did not move in a collection


def test_the_worst_delay_says_how_much_of_it_the_collector_ran() -> None:
    """As above, and making a session's second request also runs a collection that lasts
    5 ms of the injected clock. The last session's first request waits 50 ms from the run's
    start, 10 of them in the two collections before it."""
    import gc

    now = [100.0]
    collecting = [False]
    plan = plan_of("""workload w { session s repeat 3 {
        user filler 10; reply 4 replay; user filler 10; reply 4 } }""")

    class CollectingRealiser(Realiser):
        def encoded(self, req: Any, replies: Any, encode: Any) -> list[Any]:
            if len(self.plan.message_ids(req)) > 1:
                now[0] += 0.02
                collecting[0] = True
                try:
                    gc.collect(0)
                finally:
                    collecting[0] = False
            return super().encoded(req, replies, encode)

    def slow_collection(phase: str, info: dict) -> None:  # before the run's own callback
        if phase == "stop" and collecting[0]:
            now[0] += 0.005

    gc.callbacks.append(slow_collection)
    try:
        run, _ = execute(plan, realiser=CollectingRealiser, clock=lambda: now[0], ahead=False)
    finally:
        gc.callbacks.remove(slow_collection)
    assert run.client["client_delay_max_ms"] == pytest.approx(50)
    assert run.client["client_delay_max_gc_ms"] == pytest.approx(10)


def test_the_learnt_cold_prefill_speed_is_the_median_so_far_and_made_once_per_sample() -> None:
    """Without a calibrated cold speed, records are judged against the median of the cold
    prefills measured so far (a cold one: at most 10% cached, at least 256 uncached tokens);
    the reference is made again only when a new one is measured."""
    from types import SimpleNamespace

    from workloadlang.run.contention import Slots
    from workloadlang.run.isolation import Isolation
    from workloadlang.run.record import Recorder, TtftReference

    plan = plan_of(WORKLOAD)
    recorder = Recorder(plan, Slots(1, lambda: 0.0), Isolation(lambda: False, lambda: 0.0),
                        TtftReference(), prefill_own=False)

    def seen(uncached: int, seconds: float, cached: int = 0, shared: float = 0.0,
             late: float | None = None, source: str = "server") -> None:
        recorder.cold.see(SimpleNamespace(
            cached_tokens=cached, prompt_tokens=uncached + cached, error=None,
            prefill_s=seconds, uncached_tokens=uncached, prefill_source=source,
            prefill_contended_s=shared if source == "server" else None,
            ttft_contended_s=shared if source != "server" else None, ttft_late_s=late))

    assert recorder.reference().cold_prefill_tps is None
    seen(1000, 1.0)
    seen(3000, 1.0)
    seen(2000, 1.0, cached=2000)  # half cached: not a cold prefill
    seen(100, 1.0)  # too few tokens to time
    seen(500, 1.0, shared=0.1)  # another request was in flight: it looks slower than it is
    seen(500, 1.0, shared=0.1, source="client_ttft")
    seen(500, 1.0, late=0.1, source="client_ttft")  # a stamp that may be 10 % late
    first = recorder.reference()
    assert first.cold_prefill_tps in (1000, 3000) and recorder.reference() is first
    seen(2000, 1.0)
    assert recorder.reference().cold_prefill_tps == 2000  # the median of 1000, 2000, 3000


def test_a_learnt_speed_over_ttfts_leaves_out_what_any_request_costs_besides_its_prefill() -> None:
    """Without the engine's prefill time, a TTFT also holds what any request costs besides its
    prefill (here 20 ms, on an engine prefilling 100k tokens/s). Over the whole TTFT, three cold
    300-token requests (23 ms) would say 13k tokens/s: an 8k context recomputed in 100 ms would
    then look like a hit (a cold prefill priced at 615 ms). The speed is over the tokens and the
    TTFT beyond the fastest request's, and that cost is allowed for once."""
    from types import SimpleNamespace

    from workloadlang.run.record import ColdSpeed, TtftReference, evidence

    def record(uncached: int, ttft: float, cached: int = 0, late: float | None = None,
               shared: float = 0.0) -> SimpleNamespace:
        return SimpleNamespace(cached_tokens=cached, prompt_tokens=uncached + cached,
                               error=None, prefill_s=ttft, uncached_tokens=uncached,
                               prefill_source="client_ttft", prefill_contended_s=None,
                               ttft_contended_s=shared, ttft_late_s=late)

    cold = ColdSpeed()
    for _ in range(3):
        cold.see(record(300, 0.023))
    assert cold.speed() == (None, 0.0)  # one size only: nothing to tell the fixed cost by
    cold.see(record(8000, 0.100))
    cold.see(record(4000, 0.055, shared=0.01))  # another request in flight: not its own time
    cold.see(record(5000, 0.050, late=0.04))  # a stamp late by more than 5 %: not used
    speed, fixed = cold.speed()
    assert speed == pytest.approx(7700 / 0.077)
    assert fixed == pytest.approx(0.020)
    # a hit: the fastest request, not a cold one; beyond it the small ones tell the speed too
    cold.see(record(14, 0.0201, cached=8000))
    speed, fixed = cold.speed()
    assert speed == pytest.approx(286 / 0.0029) and fixed == pytest.approx(0.020, abs=1e-4)
    ref = TtftReference(cold_prefill_tps=speed, fixed_s=fixed)

    def reread(ttft: float) -> bool | None:
        req = SimpleNamespace(id="s/9", expected_cached=8000, prompt_tokens=8014)
        o = SimpleNamespace(error=None, prompt_tokens=8014, cached_tokens=8000, ttft_s=ttft,
                            ttft_late_s=None, server_prefill_ms=None, completion_tokens=1,
                            streamed_tokens=1, e2e_s=ttft)
        return evidence(req, o, None, None, 0.66, ref, 0.0, 0.0)["ttft_agrees"]

    assert reread(0.100) is False  # recomputed
    assert reread(0.021) is True  # a hit


def test_the_learnt_speed_keeps_the_latest_samples_only(monkeypatch) -> None:
    """Memory and the median's cost stay bounded over a run of any length."""
    from types import SimpleNamespace

    from workloadlang.run.record import ColdSpeed

    monkeypatch.setattr(ColdSpeed, "SAMPLES", 3)
    cold = ColdSpeed()
    for tps in (1000, 1000, 1000, 3000, 3000, 3000):
        cold.see(SimpleNamespace(cached_tokens=0, prompt_tokens=3000, error=None,
                                 prefill_s=3000 / tps, uncached_tokens=3000,
                                 prefill_source="server", prefill_contended_s=0.0))
    assert len(cold.server) == 3 and cold.speed() == (3000, 0.0) and cold.seen == 6
