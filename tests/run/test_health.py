"""The client's health: the event loop's lag and how long the client's thread ran in the worst
of it, the garbage collector's pauses, and when the client counts as the bottleneck. Timing
logic on injected clocks."""

from __future__ import annotations

import asyncio

import pytest

from workloadlang.run.health import GcPauses, Lag, bottleneck


@pytest.mark.parametrize("busy", [True, False])
def test_the_worst_loop_lag_says_how_long_the_client_ran_in_it(busy: bool) -> None:
    """The loop is held 100 ms of the injected clock: by the client's own work (its thread ran
    95 ms of the interval, on the injected CPU clock) or by something that does not run the
    client (the operating system gave the CPU away: its thread ran 1 ms). The other wake-ups
    are on time."""
    now, cpu = [0.0], [0.0]

    async def go() -> Lag:
        lag = Lag(lambda: now[0], lambda: cpu[0])
        task = asyncio.ensure_future(lag.watch())
        for _ in range(3):
            await asyncio.sleep(0.006)  # wake-ups on time: the injected clocks stand still
        now[0] += 0.1  # the hold, within one of the monitor's sleeps
        cpu[0] += 0.095 if busy else 0.001
        for _ in range(3):
            await asyncio.sleep(0.006)
        task.cancel()
        return lag

    lag = asyncio.run(go())
    worst, ran, at = lag.worst
    assert worst == max(lag.samples) == pytest.approx(0.095)
    assert sum(1 for s in lag.samples if s > 0) == 1
    assert ran == pytest.approx(0.095 if busy else 0.001) and at == pytest.approx(0.1)


def test_the_longest_collector_pause_and_its_generation_are_kept() -> None:
    """A fake clock that advances 1 s per reading: every collection lasts 1 s; a full one (gen
    2) started by hand is recorded with its generation, and nothing after the probe is gone."""
    import gc
    import itertools

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


def test_the_collectors_pauses_within_a_window_are_summed_from_the_latest_kept() -> None:
    """A fake clock that advances 1 s per reading: three collections by hand last [0, 1],
    [2, 3] and [4, 5]; with two kept, the first is forgotten."""
    import gc
    import itertools

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


def test_the_client_is_a_bottleneck_only_when_its_delay_shapes_the_load() -> None:
    """A p99 over 10 ms is a bottleneck in front of short requests, not in front of requests
    that take seconds (on a busy real engine sharing the machine: 12.6 ms in front of ~10 s)."""
    assert bottleneck(0.0126, 0.4) is True  # the scale run's 400 ms requests: 3 %
    assert bottleneck(0.016, 0.007) is True  # faster than the client
    assert bottleneck(0.0126, 10.0) is False  # 0.13 %
    assert bottleneck(0.009, 0.001) is False  # within the bound
    assert bottleneck(0.02, None) is True  # nothing completed: judged on the bound alone


def test_a_decisive_measurement_waits_for_a_quiet_client_at_most_a_bound() -> None:
    """`ClientHealth.quiet`: the client's deferred work is done first (`flush`); then, when the
    event loop's latest wake-up was late, it waits for one that was not, at most
    `QUIET_MAX_S`; quiet already, it does not wait. The clock is injected: each reading is
    a millisecond on."""
    from workloadlang.run.health import QUIET_MAX_S, ClientHealth

    ticks = iter(range(10**6))
    health = ClientHealth(clock=lambda: next(ticks) / 1000)
    health.task = object()  # the watch is on
    flushed = []

    async def lag_settles() -> float:
        health.lag.samples.append(0.004)  # the latest wake-up was 4 ms late

        async def watch() -> None:
            for lag in (0.003, 0.0002):
                await asyncio.sleep(0)
                health.lag.samples.append(lag)

        task = asyncio.ensure_future(watch())
        waited = await health.quiet(lambda: flushed.append(True))
        await task
        return waited

    waited = asyncio.run(lag_settles())
    assert flushed == [True] and 0 < waited < QUIET_MAX_S
    assert health.lag.samples[-1] < 0.001 and health.quiet_waits == [waited]
    assert asyncio.run(health.quiet()) == 0.0, "quiet already: no wait"
    health.lag.samples.append(0.02)  # never quiet again: the bound holds
    assert asyncio.run(health.quiet()) >= QUIET_MAX_S
