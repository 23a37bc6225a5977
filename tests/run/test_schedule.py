"""The executor's schedule over both pacings: copies sent at their planned arrivals with their
schedule lag recorded, a session's `concurrency` cap holding (a copy waiting for its place has
schedule lag, not client delay), and the time to read the previous answer (`wait reading`)
from the tokens it really had."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest

from runexec import answer, execute, plan_of
from workloadlang.run.schedule import planned_wait, reading_time

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

PACINGS = pytest.mark.parametrize("ahead", [True, False], ids=["write-ahead", "in-turn"])


@PACINGS
def test_copies_go_at_their_arrivals_and_record_their_lag(ahead: bool) -> None:
    plan = plan_of('workload w { session t repeat 3 arrive every 80ms { user "x"; reply 4 } }')
    assert [r.send_at for r in plan.requests] == [0.0, 0.08, 0.16]
    result, _ = execute(plan, ahead=ahead)
    recs = result.records
    assert [r.planned_send_at for r in recs] == [0.0, 0.08, 0.16]
    for r in recs:
        assert r.error is None and r.schedule_lag_s is not None
        assert r.schedule_lag_s >= 0  # not before its time
        assert r.t_start_s == pytest.approx(r.planned_send_at + r.schedule_lag_s, abs=1e-6)
    assert result.client["scheduled"] == 3
    assert result.client["schedule_lag_max_ms"] == pytest.approx(
        max(r.schedule_lag_s for r in recs) * 1000, abs=0.01)


@PACINGS
def test_the_cap_holds_and_the_wait_for_a_place_is_schedule_lag(ahead: bool) -> None:
    """Three copies arriving 10 ms apart, one at a time: each copy's two requests (50 ms
    each) run before the next copy's first; the later copies' lag is their wait for a place,
    which is not counted as the client's delay."""
    plan = plan_of('workload w { session t repeat 3 arrive every 10ms concurrency 1 '
                   '{ user "x"; reply 4; user "y"; reply 4 } }')
    order: list[str] = []
    inflight = [0]
    most = [0]

    async def chat(request: httpx.Request) -> httpx.Response:
        order.append(request.headers["x-wl-session"])
        inflight[0] += 1
        most[0] = max(most[0], inflight[0])
        await asyncio.sleep(0.05)
        inflight[0] -= 1
        return answer()

    result, _ = execute(plan, chat, ahead=ahead)
    assert [r.error for r in result.records] == [None] * 6
    assert order == ["t#0", "t#0", "t#1", "t#1", "t#2", "t#2"] and most[0] == 1
    lags = {r.session: r.schedule_lag_s for r in result.records if r.planned_send_at is not None}
    assert lags["t#0"] < lags["t#1"] < lags["t#2"]
    assert lags["t#1"] >= 0.09 - 0.01 and lags["t#2"] >= 0.18 - 0.01  # 2 x 50 ms less 10 ms
    assert result.client["schedule_late"] >= 2
    # the place's wait is not the client's delay (counted there, it would be t#2's lag)
    assert result.client["client_delay_max_ms"] < 1000 * lags["t#2"] - 50


@PACINGS
def test_capped_copies_without_arrivals_are_not_written_at_the_start(ahead: bool) -> None:
    plan = plan_of('workload w { session t repeat 4 concurrency 2 { user "x"; reply 4 } }')
    inflight, most = [0], [0]

    async def chat(request: httpx.Request) -> httpx.Response:
        inflight[0] += 1
        most[0] = max(most[0], inflight[0])
        await asyncio.sleep(0.03)
        inflight[0] -= 1
        return answer()

    result, _ = execute(plan, chat, ahead=ahead)
    assert [r.error for r in result.records] == [None] * 4 and most[0] == 2


def test_the_reading_time_is_the_previous_answers_tokens_at_the_rate() -> None:
    plan = plan_of('workload w { session s { user "a"; reply 64; wait 1s reading 50; '
                   'user "b"; reply 4 } }')
    first, second = plan.requests
    assert second.wait_before == 1.0 and second.wait_per_token == pytest.approx(0.02)
    reported = {first.id: SimpleNamespace(completion_tokens=20, streamed_tokens=3)}
    streamed = {first.id: SimpleNamespace(completion_tokens=None, streamed_tokens=10)}
    assert reading_time(second, reported) == pytest.approx(0.4)  # reported tokens first
    assert reading_time(second, streamed) == pytest.approx(0.2)
    assert reading_time(second, {}) == 0.0 and reading_time(first, reported) == 0.0
    assert planned_wait(second, reported) == pytest.approx(1.4)


@PACINGS
def test_a_copy_held_by_its_phases_barrier_is_late_only_from_the_barrier(ahead: bool) -> None:
    """Tenants planned at 0, 10 and 20 ms in a phase that opens when a 200 ms warm-up ends:
    the barrier holds them as the plan says, so their lag counts from its opening."""
    plan = plan_of('workload w { session v { phase warm { user "x"; reply 4 } } '
                   'session t repeat 3 arrive every 10ms { phase flood { user "y"; reply 4 } } }')

    async def chat(request: httpx.Request) -> httpx.Response:
        if request.headers["x-wl-session"] == "v#0":
            await asyncio.sleep(0.2)
        return answer()

    result, _ = execute(plan, chat, ahead=ahead)
    tenants = [r for r in result.records if r.session.startswith("t#")]
    assert [r.planned_send_at for r in tenants] == [0.0, 0.01, 0.02]
    assert min(r.t_start_s for r in tenants) > 0.19  # held by the barrier
    assert max(r.schedule_lag_s for r in tenants) < 0.1  # not the barrier's 0.2 s
    assert result.client["schedule_late"] <= sum(r.schedule_lag_s > 0.01 for r in tenants)
