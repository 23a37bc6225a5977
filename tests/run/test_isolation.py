"""Isolated requests (`isolated`): timed with nothing else of the run in flight.

Against the simulator over loopback: no other request of the run overlaps an isolated one from
its send to its end; an isolated block runs as one stretch; the records and the results say
what it cost. `Isolation` alone: the order in which sessions take it, and that a request that
is not isolated waits while another session holds it or waits for it."""

from __future__ import annotations

import asyncio

import pytest

from runhelp import wl_run_text
from workloadlang.plan.model import PRequest
from workloadlang.run.isolation import Isolation

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

WL = """
workload iso {
  concurrency = 3
  session main repeat 3 {
    system "You are a helpful assistant."
    grow until 3k by 500 label main { user filler 500; reply 8 }
    spawn 2 fork isolated label twin { user filler 200; reply 8 }
    spawn 1 cold label sub { user filler 2k; reply 8 }
    turn finalize isolated { user filler 200; reply 8 }
  }
}
"""


def window(r: dict) -> tuple[float, float]:
    return r["t_start_s"], r["t_start_s"] + r["e2e_s"]


def test_nothing_of_the_run_overlaps_an_isolated_request(tmp_path):
    code, res = wl_run_text(tmp_path, WL, "--sim", "--sim-prefill-us-per-token", "20",
                            "--sim-decode-us-per-token", "200")
    assert code == 0
    recs = [r for r in res["records"] if not r["skipped"]]
    isolated = [r for r in recs if r["isolated"]]
    assert len(isolated) == 9 and all(r["label"] in ("twin", "finalize") for r in isolated)
    for r in isolated:
        a, b = window(r)
        others = [o["id"] for o in recs if o["id"] != r["id"]
                  and window(o)[0] < b and window(o)[1] > a]
        assert others == [], (r["id"], others)
        assert r["ttft_contended_s"] == 0 and r["isolation_wait_s"] is not None
    # a session's two isolated forks run as one stretch: nothing of the run starts between
    for s in ("main#0", "main#1", "main#2"):
        twins = sorted((r for r in isolated if r["session"] == s and r["label"] == "twin"),
                       key=lambda r: r["t_start_s"])
        gap = (window(twins[0])[1], twins[1]["t_start_s"])
        assert not [o["id"] for o in recs if gap[0] < o["t_start_s"] < gap[1]]
    client = res["client"]
    assert client["isolated_requests"] == 9
    assert client["isolation_wait_s"] == round(sum(r["isolation_wait_s"] for r in isolated), 6)
    held = [r["isolation_held_s"] for r in recs if r["isolation_held_s"]]
    assert client["isolation_held_s"] == round(sum(held), 6) > 0  # others waited for them
    assert client["isolation_active_s"] >= sum(r["e2e_s"] for r in isolated)


def req(rid: str, session: str, isolated: bool) -> PRequest:
    from workloadlang.ir import Span
    return PRequest(id=rid, seq=0, session=session, session_name="s", copy_index=0, phase="",
                    label="x", index=0, kind="reply", last_message=None, new_tokens=0,
                    prompt_tokens=1, expected_cached=0, max_tokens=1, isolated=isolated,
                    span=Span(file="t", line=1, col=1, end_line=1, end_col=1))


def test_sessions_take_the_isolation_in_turn_and_others_wait_for_it():
    async def go() -> list[str]:
        in_flight = {"n": 1}  # one request of the run is in flight at the start
        iso = Isolation(lambda: in_flight["n"] > 0, clock=asyncio.get_running_loop().time)
        order: list[str] = []

        async def send(r: PRequest, after: PRequest | None) -> None:
            await iso.enter(r)
            order.append(r.id)
            in_flight["n"] += 1
            await asyncio.sleep(0.01)
            in_flight["n"] -= 1
            iso.leave(r.session, after)
            iso.poke()

        a1, a2 = req("a1", "a", True), req("a2", "a", True)
        b1, c1 = req("b1", "b", True), req("c1", "c", False)

        async def session_a() -> None:
            await send(a1, a2)
            await send(a2, None)

        tasks = [asyncio.ensure_future(session_a())]
        await asyncio.sleep(0)
        tasks.append(asyncio.ensure_future(send(b1, None)))
        await asyncio.sleep(0)
        tasks.append(asyncio.ensure_future(send(c1, None)))
        await asyncio.sleep(0.02)
        assert order == []  # all wait for the request in flight to end
        in_flight["n"] -= 1
        iso.poke()
        await asyncio.gather(*tasks)
        assert iso.summary()["isolated_requests"] == 3
        assert iso.held["c1"] > 0 and iso.waited["a1"] > 0
        return order

    # a's block first (asked first), b next (it asked before c went), c last
    assert asyncio.run(go()) == ["a1", "a2", "b1", "c1"]


PHASED = """
workload phased {
  concurrency = 2
  session main repeat 2 {
    phase one { user filler 300; reply 4 isolated }
    phase two { user filler 300; reply 4 isolated; reply 4 }
  }
}
"""


def test_an_isolated_request_before_a_phase_barrier_gives_the_isolation_back(tmp_path):
    """Each session's isolated requests sit on both sides of a barrier: kept across it, the
    first session to reach the barrier would keep the other from reaching it."""
    code, res = wl_run_text(tmp_path, PHASED, "--sim", "--time-budget", "20")
    assert code == 0, res.get("incomplete")
    assert sum(r["isolated"] for r in res["records"]) == 4


def test_the_reader_thread_is_scheduled_first_while_a_request_is_timed_alone():
    """While a request is timed alone the socket reader runs real-time, so it reads the first
    token's packet before the next one lands (merged, the first would get the second's stamp);
    after, it is back at nice 19. A reader whose thread starts during an isolated stretch
    starts so. Without the right to do so (not root), nothing changes."""
    import os

    import pytest

    from workloadlang.wire import Reader

    reader = Reader()
    reader.alone(True)  # before its thread started
    reader.start()
    try:
        if os.sched_getscheduler(reader.tid) != os.SCHED_FIFO:
            pytest.skip("no right to raise a thread's priority here")
        reader.alone(False)
        assert os.sched_getscheduler(reader.tid) == os.SCHED_OTHER
        assert os.getpriority(os.PRIO_PROCESS, reader.tid) == reader.nice == 19
        reader.alone(True)
        assert os.sched_getscheduler(reader.tid) == os.SCHED_FIFO
    finally:
        reader.close()
