"""The executor's work ahead of the clock and of each send: every filler sized before the run
starts (no tokenizer call competes with measured requests), requests made as soon as their
messages are final, the run's results kept out of the garbage collector's scans."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from workloadlang import api
from workloadlang.plan.realise import ExactSizer, Realiser
from workloadlang.run.client import Endpoint
from workloadlang.run.executor import Executor, ListSink

WORKLOAD = """
workload sizing {
  session s repeat 2 {
    repeat 3 label step { fresh { user filler 300; reply 4 } }
  }
}
"""

SSE = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
       b'data: {"choices":[],"usage":{"prompt_tokens":300,"completion_tokens":1}}\n\n'
       b"data: [DONE]\n\n")


def plan_of(text: str) -> Any:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, {}, salt="t",
                         env={"max_context": 65536})


async def words(text: str) -> int:
    return len(text.split())  # one token per word: the first guess is exact


def answer(request: httpx.Request | None = None) -> httpx.Response:
    return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})


def execute(plan: Any, chat: Any = answer, *, sink: ListSink | None = None, count: Any = words,
            realiser: Any = Realiser, **options: Any) -> tuple[Any, Executor]:
    """Run `plan` against a mock engine answering with `chat`; `options` go to the `Executor`
    (a `clock`). Output: (run result, executor)."""
    async def go() -> tuple[Any, Executor]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(chat)) as client:
            executor = Executor(plan, realiser(plan, ExactSizer(count)), client,
                                Endpoint(base_url="http://engine/v1", model="m"),
                                sink if sink is not None else ListSink(), **options)
            return await executor.run(), executor

    return asyncio.run(go())


def test_every_request_is_sized_before_the_first_send() -> None:
    plan = plan_of(WORKLOAD)
    log: list[tuple[str, int]] = []
    inflight = [0]

    async def count(text: str) -> int:
        log.append(("count", inflight[0]))
        return len(text.split())  # one token per word: the first guess is exact

    async def chat(request: httpx.Request) -> httpx.Response:
        inflight[0] += 1
        log.append(("chat", inflight[0]))
        await asyncio.sleep(0.01)  # in flight: the next request's sizing runs now
        inflight[0] -= 1
        return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})

    records = execute(plan, chat, count=count)[0].records
    assert [r.error for r in records] == [None] * 6
    counts = [n for kind, n in log if kind == "count"]
    assert len(counts) == 6  # one exact tokenizer call per filler
    first_chat = next(i for i, (kind, _) in enumerate(log) if kind == "chat")
    assert [k for k, _ in log[:first_chat]] == ["count"] * 6  # no tokenizer call during the run
    assert all(n == 0 for n in counts)


def test_client_delay_counts_work_between_an_answer_and_the_next_send() -> None:
    """Work between an answer's end and the next send (here a realiser taking 50 ms per
    request, as a huge context would) is client delay: it is measured from the answer's end,
    so it shows. The first requests, made before the clock, carry none of it."""
    import time

    plan = plan_of(WORKLOAD.replace("repeat 2", "repeat 1"))

    class SlowRealiser(Realiser):
        def encoded(self, req: Any, replies: Any, encode: Any) -> list[Any]:
            time.sleep(0.05)
            return super().encoded(req, replies, encode)

    run, executor = execute(plan, realiser=SlowRealiser)
    health, delays = run.client, executor.delays
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
from workloadlang.run import executor
from workloadlang.run.client import Endpoint
seen = []
real_send = executor.send
async def send(*a, **k):
    seen.append("anyio._backends._asyncio" in sys.modules)
    return await real_send(*a, **k)
executor.send = send
SSE = {SSE!r}
source = api.Source(name="w.wl", text={WORKLOAD.replace("repeat 2", "repeat 1")!r})
plan = api.make_plan(api.parse_checked(source), source, {{}}, salt="t", env={{"max_context": 65536}})
def chat(request):
    return httpx.Response(200, content=SSE, headers={{"content-type": "text/event-stream"}})
async def go():
    async with httpx.AsyncClient(transport=httpx.MockTransport(chat)) as client:
        await executor.Executor(plan, Realiser(plan, RatioSizer(1.0)), client,
                                Endpoint(base_url="http://engine/v1", model="m"),
                                executor.ListSink()).run()
asyncio.run(go())
print(seen[0])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


EARLY = """
workload early {
  session s repeat 2 {
    turn a { user filler 50; reply 4 }
    spawn 1 cold label sub { user filler 50; reply 4 }
    turn finalize { user filler 50; reply 4 }
  }
}
"""


def test_requests_are_made_before_their_turn_when_their_messages_are_final(monkeypatch) -> None:
    """Realising and encoding happen ahead of the send when nothing they need is missing: every
    session's first request before the clock starts, the finalize (which carries turn a's reply,
    not the sub-agent's) while the sub-agent is in flight. The early body is the final one."""
    from workloadlang.run import executor as executor_mod

    plan = plan_of(EARLY)
    log: list[tuple[str, str]] = []
    bodies: dict[str, dict[str, Any]] = {}
    real_build = executor_mod.build

    def build(endpoint: Endpoint, wire: Any) -> httpx.Request:
        log.append(("build", wire.id))
        return real_build(endpoint, wire)

    monkeypatch.setattr(executor_mod, "build", build)

    async def chat(request: httpx.Request) -> httpx.Response:
        rid = request.headers["x-wl-request"]
        bodies[rid] = json.loads(request.content)
        log.append(("sent", rid))
        await asyncio.sleep(0.02)
        log.append(("answered", rid))
        return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})

    records = execute(plan, chat)[0].records
    assert [r.error for r in records] == [None] * len(plan.requests)
    first_send = next(i for i, (kind, _) in enumerate(log) if kind == "sent")
    firsts = [plan_req.id for plan_req in plan.requests if plan_req.label == "a"]
    assert len(firsts) == 2
    assert {rid for kind, rid in log[:first_send] if kind == "build"} == set(firsts)
    for final in (r for r in plan.requests if r.label == "finalize"):
        sub = next(r for r in plan.requests if r.session == final.session and r.label == "sub")
        assert log.index(("build", final.id)) < log.index(("answered", sub.id))
        assert log.count(("build", final.id)) == 1
        messages = bodies[final.id]["messages"]
        assert {"role": "assistant", "content": "hi"} in messages  # turn a's reply, replayed


def test_the_run_keeps_its_results_out_of_the_collectors_scans(monkeypatch) -> None:
    """Before the clock and then every few records, what the run keeps is frozen (no collection
    walks all of the run's results); afterwards nothing stays frozen."""
    import gc

    from workloadlang.run import executor as executor_mod

    monkeypatch.setattr(executor_mod, "_FREEZE_EVERY", 2)
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


def test_records_reach_the_sink_in_order_and_a_failing_sink_stops_the_run() -> None:
    """A record reaches the sink on the loop iteration after its session's next request is
    written: every record still arrives, in completion order, before `run` returns; a sink
    that fails (a full disk) stops the run with its error."""
    import pytest

    plan = plan_of(WORKLOAD)

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.005)
        return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})

    class FailingSink(ListSink):
        def record(self, rec: Any) -> None:
            if len(self.records) == 2:
                raise OSError("No space left on device")
            super().record(rec)

    sink = ListSink()
    run, executor = execute(plan, chat, sink=sink)
    assert sorted(r.id for r in sink.records) == sorted(r.id for r in run.records)
    ends = [executor.outcomes[r.id].t_send + executor.outcomes[r.id].e2e_s for r in sink.records]
    assert ends == sorted(ends)
    with pytest.raises(OSError, match="No space"):
        execute(plan, chat, sink=FailingSink())


def _logging_run(monkeypatch: Any, plan: Any, chat: Any) -> list[tuple[str, str]]:
    """Run `plan`; output: ("sent", id) and ("record", id) in the order they happened."""
    from workloadlang.run import executor as executor_mod

    log: list[tuple[str, str]] = []
    real = executor_mod.build_record

    def build_record(req: Any, *args: Any, **kw: Any) -> Any:
        log.append(("record", req.id))
        return real(req, *args, **kw)

    monkeypatch.setattr(executor_mod, "build_record", build_record)

    async def logged(request: httpx.Request) -> httpx.Response:
        log.append(("sent", request.headers["x-wl-request"]))
        return await chat(request)

    execute(plan, logged)
    return log


def test_a_record_is_built_after_the_sessions_next_send_unless_that_needs_it(monkeypatch) -> None:
    """Building a record waits until the session's next request is written; an errored answer's
    record is built at once (the errors-in-a-row stop reads it before the next send)."""
    plan = plan_of(WORKLOAD.replace("repeat 2", "repeat 1"))
    ids = [r.id for r in plan.requests]

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.005)
        if request.headers["x-wl-request"] == ids[1]:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    assert log.index(("sent", ids[1])) < log.index(("record", ids[0]))  # ok: after the next send
    assert log.index(("record", ids[1])) < log.index(("sent", ids[2]))  # error: before it
    assert sorted(rid for kind, rid in log if kind == "record") == sorted(ids)


def test_defer_wait_waits_for_quiet_or_for_the_cap() -> None:
    from workloadlang.run.executor import _DEFER_MAX_S, _QUIET_S, defer_wait

    assert defer_wait(10.0, last_answer=10.0, since=10.0) == _QUIET_S  # an answer just now
    assert defer_wait(10.0, last_answer=10.0 - _QUIET_S / 3, since=9.99) == \
        pytest.approx(_QUIET_S * 2 / 3)
    assert defer_wait(10.0, last_answer=10.0 - _QUIET_S, since=10.0) == 0.0  # quiet long enough
    assert defer_wait(10.0, last_answer=10.0, since=10.0 - _DEFER_MAX_S) == 0.0  # waited enough
    assert defer_wait(10.0, last_answer=10.0, since=10.0 - _DEFER_MAX_S + _QUIET_S / 2) == \
        pytest.approx(_QUIET_S / 2)  # the cap comes first


def test_a_burst_of_answers_sends_every_next_request_before_any_record(monkeypatch) -> None:
    """Eight sessions answered together, one every 2 ms (an engine ending a batch, written
    stream by stream): every session's next request is written before the loop builds any
    record of the burst (built on the loop's next pass, they would be in between)."""
    from workloadlang.run import executor as executor_mod

    monkeypatch.setattr(executor_mod, "_QUIET_S", 0.2)  # robust on a slow machine
    plan = plan_of(WORKLOAD.replace("repeat 2", "repeat 8").replace("repeat 3", "repeat 2"))
    gate = {"n": 0, "open": None}

    async def chat(request: httpx.Request) -> httpx.Response:
        if gate["open"] is None:
            gate["open"] = asyncio.Event()
        gate["n"] += 1
        position = gate["n"]
        if gate["n"] == 8:  # all first requests are in: answer them together
            gate["open"].set()
        await gate["open"].wait()
        if position <= 8:
            await asyncio.sleep(0.002 * position)
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    firsts = {r.id for r in plan.requests if r.index == 0}
    seconds = {r.id for r in plan.requests if r.index == 1}
    last_second_sent = max(log.index(("sent", rid)) for rid in seconds)
    first_record = min(log.index(("record", rid)) for rid in firsts)
    assert last_second_sent < first_record


def test_records_are_built_within_the_cap_while_answers_keep_coming(monkeypatch) -> None:
    """Never quiet (an answer every few ms for the whole run): records are still built and
    written during the run, once deferred work waited `_DEFER_MAX_S`."""
    from workloadlang.run import executor as executor_mod

    monkeypatch.setattr(executor_mod, "_QUIET_S", 60.0)
    monkeypatch.setattr(executor_mod, "_DEFER_MAX_S", 0.02)
    plan = plan_of(WORKLOAD.replace("repeat 2", "repeat 1").replace("repeat 3", "repeat 30"))

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.004)
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    ids = [r.id for r in plan.requests]
    assert log.index(("record", ids[0])) < log.index(("sent", ids[-1]))


def test_deferred_work_yields_a_loop_turn_to_answers_just_ended(monkeypatch) -> None:
    """A deferred pass that finds responses read to their end since the last pass does no work
    and runs again after one loop turn (the sessions of those answers go first), even when its
    work is overdue; but never twice in a row: answers ending before every pass do not starve
    the work (one item a pass here: each takes longer than a slice)."""
    import time

    from workloadlang.run import executor as executor_mod

    ended = {"n": 0}
    monkeypatch.setattr(executor_mod, "responses_ended", lambda: ended["n"])
    plan = plan_of(WORKLOAD)
    first, second = plan.requests[0].id, plan.requests[1].id
    made: list[str] = []

    def build_early(req: Any) -> None:
        time.sleep(0.002)
        made.append(req.id)

    async def go() -> list[list[str]]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            ex = Executor(plan, Realiser(plan), client,
                          Endpoint(base_url="http://engine/v1", model="m"), ListSink())
            monkeypatch.setattr(ex, "_build_early", build_early)
            ex.ahead = [plan.requests[0], plan.requests[1]]
            ex.flush_due, ex.last_answer = True, -1e9  # quiet: the work is due
            seen = []
            for turn in range(4):
                ended["n"] += 1  # the transport read an answer's last byte before each pass
                if turn == 0:
                    ex._deferred()
                else:
                    await asyncio.sleep(0)  # one loop turn: the pass scheduled again runs
                seen.append(list(made))
            return seen

    assert asyncio.run(go()) == [[], [first], [first], [first, second]]


@pytest.mark.parametrize("busy", [True, False])
def test_the_worst_loop_lag_says_how_long_the_client_ran_in_it(busy: bool) -> None:
    """The loop is held 100 ms: by the client's own work (spinning: its thread ran nearly all
    of the interval) or by something that does not run the client (a blocking sleep standing in
    for the OS giving the CPU away: its thread hardly ran)."""
    import time

    from workloadlang.run.executor import Lag

    async def go() -> Lag:
        lag = Lag(time.perf_counter)
        task = asyncio.ensure_future(lag.watch())
        await asyncio.sleep(0.02)
        end = time.perf_counter() + 0.1
        if busy:
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(0.1)
        await asyncio.sleep(0.02)
        task.cancel()
        return lag

    lag = asyncio.run(go())
    worst, ran, _ = lag.worst
    assert worst == max(lag.samples) and worst >= 0.08
    assert (ran > 0.06) if busy else (ran < 0.03), ran


def test_the_longest_collector_pause_and_its_generation_are_kept() -> None:
    """A fake clock that advances 1 s per reading: every collection lasts 1 s; a full one (gen
    2) started by hand is recorded with its generation, and nothing after the probe is gone."""
    import gc
    import itertools

    from workloadlang.run.executor import GcPauses

    ticks = itertools.count()
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection in between: exactly the one started by hand
    try:
        with GcPauses(clock=lambda: float(next(ticks))) as gcs:
            gc.collect(2)
    finally:
        if was_enabled:
            gc.enable()
    assert gcs.count == 1 and gcs.longest == (1.0, 2)
    count = gcs.count
    gc.collect()
    assert gcs.count == count  # removed from gc.callbacks on exit


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
            if len(self.plan.message_ids(req)) > 1:  # the second request of a session: after its first answer
                now[0] += 0.02
            return super().encoded(req, replies, encode)

    run, executor = execute(plan, realiser=SlowRealiser, clock=lambda: now[0])
    health = run.client
    assert [r.error for r in run.records] == [None] * 6
    sent = {o.id: round(o.t_send - 100.0, 3) for o in executor.outcomes.values()}
    assert sent["s#2/reply/0"] == 0.04 and sent["s#0/reply/0.1"] == sent["s#1/reply/0"] == 0.02
    assert health["client_delay_max_ms"] == pytest.approx(40)
    assert health["client_delay_max_sends_meanwhile"] == 2
    assert health["client_delay_max_at_s"] == pytest.approx(0.04)
    assert health["client_delay_max_gc_ms"] == 0.0  # the clock did not move in a collection


def test_the_collectors_pauses_within_a_window_are_summed_from_the_latest_kept() -> None:
    """A fake clock that advances 1 s per reading: three collections by hand last [0, 1],
    [2, 3] and [4, 5]; with two kept, the first is forgotten."""
    import gc
    import itertools

    from workloadlang.run.executor import GcPauses

    ticks = itertools.count()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with GcPauses(clock=lambda: float(next(ticks)), keep=2) as gcs:
            for _ in range(3):
                gc.collect(0)
    finally:
        if was_enabled:
            gc.enable()
    assert list(gcs.recent) == [(2.0, 3.0), (4.0, 5.0)]
    assert gcs.within(0.0, 10.0) == 2.0  # the first pause is no longer kept
    assert gcs.within(2.5, 4.25) == 0.75  # half of one, a quarter of the other
    assert gcs.within(3.0, 4.0) == 0.0


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
        run, _ = execute(plan, realiser=CollectingRealiser, clock=lambda: now[0])
    finally:
        gc.callbacks.remove(slow_collection)
    assert run.client["client_delay_max_ms"] == pytest.approx(50)
    assert run.client["client_delay_max_gc_ms"] == pytest.approx(10)


def test_the_learnt_cold_prefill_speed_is_the_median_so_far_and_made_once_per_sample() -> None:
    """Without a calibrated cold speed, records are judged against the median of the cold
    prefills measured so far (a cold one: at most 10% cached, at least 256 uncached tokens);
    the reference is made again only when a new one is measured."""
    from types import SimpleNamespace

    plan = plan_of(WORKLOAD)
    executor = Executor(plan, Realiser(plan), httpx.AsyncClient(),
                        Endpoint(base_url="http://engine/v1", model="m"), ListSink())

    def seen(uncached: int, seconds: float, cached: int = 0, shared: float = 0.0,
             late: float | None = None, source: str = "server") -> None:
        executor._learn_cold_speed(SimpleNamespace(
            cached_tokens=cached, prompt_tokens=uncached + cached, error=None,
            prefill_s=seconds, uncached_tokens=uncached, prefill_source=source,
            prefill_contended_s=shared if source == "server" else None,
            ttft_contended_s=shared if source != "server" else None, ttft_late_s=late))

    assert executor._reference().cold_prefill_tps is None
    seen(1000, 1.0)
    seen(3000, 1.0)
    seen(2000, 1.0, cached=2000)  # half cached: not a cold prefill
    seen(100, 1.0)  # too few tokens to time
    seen(500, 1.0, shared=0.1)  # another request was in flight: it looks slower than it is
    seen(500, 1.0, shared=0.1, source="client_ttft")
    seen(500, 1.0, late=0.1, source="client_ttft")  # a stamp that may be 10 % late
    first = executor._reference()
    assert first.cold_prefill_tps in (1000, 3000) and executor._reference() is first
    seen(2000, 1.0)
    assert executor._reference().cold_prefill_tps == 2000  # the median of 1000, 2000, 3000


def test_the_client_is_a_bottleneck_only_when_its_delay_shapes_the_load() -> None:
    """A p99 over 10 ms is a bottleneck in front of short requests, not in front of requests
    that take seconds (on a busy real engine sharing the machine: 12.6 ms in front of ~10 s)."""
    from workloadlang.run.executor import bottleneck

    assert bottleneck(0.0126, 0.4) is True  # the scale run's 400 ms requests: 3 %
    assert bottleneck(0.016, 0.007) is True  # faster than the client
    assert bottleneck(0.0126, 10.0) is False  # 0.13 %
    assert bottleneck(0.009, 0.001) is False  # within the bound
    assert bottleneck(0.02, None) is True  # nothing completed: judged on the bound alone
