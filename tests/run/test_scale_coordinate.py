"""The run-wide barriers and isolation of a sharded run (workloadlang.scale.coordinate), with
workers in one event loop and the real `run.isolation.Isolation` on each side."""

from __future__ import annotations

import asyncio

from workloadlang.run.isolation import Isolation
from workloadlang.scale.coordinate import Coordinator, SharedIsolation

try:
    from scalehelp import DirectLink
except ImportError:  # tests/ turned into a package
    from tests.scalehelp import DirectLink


class Req:
    """The fields of a planned request `Isolation` reads."""

    def __init__(self, rid: str, session: str, isolated: bool):
        self.id, self.session, self.isolated = rid, session, isolated


class Worker:
    """One worker's isolation, its `busy` set by the test (a request in flight)."""

    def __init__(self, link: DirectLink, index: int):
        self.in_flight = 0
        self.shared = SharedIsolation(link, index)
        self.iso = Isolation(lambda: self.in_flight > 0, asyncio.get_running_loop().time,
                             shared=self.shared)
        self.shared.start()

    def end_one(self) -> None:
        self.in_flight -= 1
        self.iso.poke()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_barrier_opens_when_every_worker_arrived_and_the_driver_opened_it():
    async def main():
        coord = Coordinator(workers=2, barriers=2)
        a = asyncio.ensure_future(coord.arrive(0, 0))
        await settle()
        assert not a.done() and not coord.all_in[0].is_set()
        b = asyncio.ensure_future(coord.arrive(1, 0))
        await asyncio.wait_for(coord.all_arrived(0), 1)
        await settle()
        assert not a.done() and not b.done()  # the driver reads the counters first
        coord.open(0)
        await asyncio.wait_for(asyncio.gather(a, b), 1)

    asyncio.run(main())


def test_a_dead_worker_counts_as_arrived():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        a = asyncio.ensure_future(coord.arrive(0, 0))
        coord.gone(1)
        await asyncio.wait_for(coord.all_arrived(0), 1)
        coord.open(0)
        await asyncio.wait_for(a, 1)

    asyncio.run(main())


def test_an_isolated_request_waits_for_the_other_worker_to_drain():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        link = DirectLink(coord)
        w0, w1 = Worker(link, 0), Worker(link, 1)
        w0.in_flight = 1  # worker 0 has a request in flight
        took = asyncio.ensure_future(w1.iso.enter(Req("s1/fin/0", "s1", True)))
        await settle()
        assert not took.done()
        # worker 0 now sees the isolation claimed: its sessions start nothing
        assert w0.iso.claimed("s0") and w0.shared.claimed("s0")
        held = asyncio.ensure_future(w0.iso.enter(Req("s0/main/5", "s0", False)))
        await settle()
        assert not held.done()
        w0.end_one()  # worker 0's request ends: it has drained
        await asyncio.wait_for(took, 1)
        assert w1.iso.owner == "s1" and coord.state.owner == "s1"
        await settle()
        assert not held.done()  # held back while s1 is isolated
        w1.iso.leave("s1", None)
        await asyncio.wait_for(held, 1)
        assert coord.state.owner is None and not w0.iso.claimed("s0")
        w0.shared.stop()
        w1.shared.stop()

    asyncio.run(main())


def test_sessions_take_the_isolation_in_turn_across_workers():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        link = DirectLink(coord)
        w0, w1 = Worker(link, 0), Worker(link, 1)
        order: list[str] = []

        async def isolated(w: Worker, session: str) -> None:
            await w.iso.enter(Req(f"{session}/x/0", session, True))
            order.append(f"{session} in")
            assert coord.state.owner == session
            await asyncio.sleep(0.01)
            order.append(f"{session} out")
            w.iso.leave(session, None)

        await asyncio.wait_for(asyncio.gather(isolated(w0, "a"), isolated(w1, "b"),
                                              isolated(w0, "c")), 2)
        assert order in (["a in", "a out", "b in", "b out", "c in", "c out"],
                         ["a in", "a out", "c in", "c out", "b in", "b out"])
        w0.shared.stop()
        w1.shared.stop()

    asyncio.run(main())


def test_an_isolated_block_takes_the_run_once():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        link = DirectLink(coord)
        w0, w1 = Worker(link, 0), Worker(link, 1)
        for i in range(3):  # three isolated requests of one session in a row
            await asyncio.wait_for(w0.iso.enter(Req(f"s/x/{i}", "s", True)), 1)
            nxt = Req(f"s/x/{i + 1}", "s", True) if i < 2 else None
            w0.iso.leave("s", nxt)
        assert [c for c in link.calls if c[0] == "take"] == [("take", 0)]
        await settle()
        assert coord.state.owner is None
        w0.shared.stop()
        w1.shared.stop()

    asyncio.run(main())


def test_a_dead_owner_gives_the_isolation_to_the_next():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        link = DirectLink(coord)
        w0, w1 = Worker(link, 0), Worker(link, 1)
        await asyncio.wait_for(w0.iso.enter(Req("a/x/0", "a", True)), 1)
        w0.shared.stop()  # worker 0 dies holding it
        nxt = asyncio.ensure_future(w1.iso.enter(Req("b/x/0", "b", True)))
        await settle()
        assert not nxt.done()
        coord.gone(0)
        await asyncio.wait_for(nxt, 1)
        assert coord.state.owner == "b"
        w1.shared.stop()

    asyncio.run(main())


def test_a_dead_worker_need_not_drain():
    async def main():
        coord = Coordinator(workers=2, barriers=1)
        link = DirectLink(coord)
        w1 = Worker(link, 1)  # worker 0 never follows: it died before it could
        took = asyncio.ensure_future(w1.iso.enter(Req("b/x/0", "b", True)))
        await settle()
        assert not took.done()
        coord.gone(0)
        await asyncio.wait_for(took, 1)
        w1.shared.stop()

    asyncio.run(main())
