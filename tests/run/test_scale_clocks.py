"""Clock offsets to the driver (workloadlang.scale.clocks), with injected clocks."""

from __future__ import annotations

import asyncio

import pytest

from workloadlang.scale.clocks import Offset, local_instant, measure, to_driver


class FakeWorld:
    """A worker's wall clock and a driver whose clock runs `true_offset` ahead; each round trip
    takes `trips[i]` (the way there `share` of it)."""

    def __init__(self, true_offset: float, trips: list[float], share: float = 0.5):
        self.now, self.true_offset, self.trips, self.share = 1000.0, true_offset, trips, share
        self.i = 0

    def wall(self) -> float:
        return self.now

    async def ask(self) -> float:
        trip = self.trips[self.i % len(self.trips)]
        self.i += 1
        self.now += trip * self.share
        answer = self.now + self.true_offset
        self.now += trip * (1 - self.share)
        return answer


def run(coro):
    return asyncio.run(coro)


def test_symmetric_trips_give_the_offset_exactly():
    world = FakeWorld(true_offset=-3.25, trips=[0.004, 0.001, 0.003])
    off = run(measure(world.ask, world.wall, samples=3))
    assert off.offset_s == pytest.approx(-3.25)
    assert off.error_s == pytest.approx(0.0005)  # the shortest trip's half
    assert off.samples == 3


@pytest.mark.parametrize("share", [0.0, 0.2, 0.9, 1.0])
def test_asymmetric_trips_stay_within_the_error(share):
    world = FakeWorld(true_offset=12.0, trips=[0.010, 0.002, 0.050], share=share)
    off = run(measure(world.ask, world.wall, samples=6))
    assert abs(off.offset_s - 12.0) <= off.error_s + 1e-12
    assert off.error_s == pytest.approx(0.001)


def test_the_shortest_trip_counts_not_the_mean():
    world = FakeWorld(true_offset=0.5, trips=[0.2, 0.0002, 0.3], share=0.95)
    off = run(measure(world.ask, world.wall, samples=3))
    assert abs(off.offset_s - 0.5) <= 0.0001 + 1e-12  # a mean would be off by ~0.08


def test_local_instant_of_the_common_start():
    off = Offset(offset_s=2.0, error_s=0.0, samples=1)
    # the worker's wall clock says 100, its monotonic clock 7; the driver's says 102 now
    assert local_instant(102.5, off, wall=lambda: 100.0, mono=lambda: 7.0) == pytest.approx(7.5)


def test_records_move_to_the_driver_clock():
    off = Offset(offset_s=-1.5, error_s=0.0, samples=1)
    rec = {"t_send_unix": 50.0, "t_start_s": 3.0, "ttft_s": 0.2, "e2e_s": 1.0}
    # t_start_s counts from the common start already; durations are the worker's own
    assert to_driver(rec, off) == {"t_send_unix": 48.5, "t_start_s": 3.0, "ttft_s": 0.2,
                                   "e2e_s": 1.0}
    skipped = {"t_send_unix": None, "t_start_s": None}
    assert to_driver(skipped, off) == skipped


def test_no_samples_refused():
    with pytest.raises(ValueError):
        run(measure(FakeWorld(0, [0.1]).ask, samples=0))


def test_a_shard_counts_from_the_common_instant_even_when_it_gets_there_late():
    """The executor's start (`run.executor.started`): a shard's run starts at the common instant
    on its clock, waited for when ahead, counted from when already past; a run without one
    starts now."""
    from workloadlang.run.executor import started

    class Shared:
        isolation = None

        def __init__(self, instant: float):
            self.instant = instant

        async def start(self) -> float:
            return self.instant

    now = [10.0]
    clock = lambda: now[0]  # noqa: E731
    assert run(started(None, Shared(9.5), clock)) == 9.5  # late: from the instant all the same
    assert run(started(None, None, clock)) == 10.0
    ahead = asyncio.run(asyncio.wait_for(started(None, Shared(time_now() + 0.05),
                                                 time_now), 2))
    assert ahead <= time_now()


def time_now() -> float:
    import time

    return time.perf_counter()
