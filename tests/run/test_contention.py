"""`run.contention.Slots`: the concurrency limit's timeline of slots held, and how much of one
request's wait for its first token another request was in flight (time the engine may have
spent on it). Clock injected."""

from __future__ import annotations

import asyncio

import pytest

from workloadlang.run.contention import Slots


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def timeline(*steps: tuple[float, int]) -> Slots:
    """Output: slots whose timeline holds `(time, +1 / -1)` steps."""
    clock = Clock()
    slots = Slots(8, clock)

    async def go() -> None:
        for t, step in steps:
            clock.t = t
            if step > 0:
                await slots.acquire()
            else:
                slots.release()

    asyncio.run(go())
    return slots


def test_the_timeline_counts_the_slots_held() -> None:
    slots = timeline((1.0, 1), (2.0, 1), (3.0, -1), (4.0, -1))
    assert slots.times == [1.0, 2.0, 3.0, 4.0] and slots.counts == [1, 2, 1, 0]
    assert slots.held == 0 and not slots.locked()


def test_overlap_is_the_time_another_request_held_a_slot() -> None:
    # A holds 1..10 (its first token at 6); B 2..4; C 5..12
    slots = timeline((1.0, 1), (2.0, 1), (4.0, -1), (5.0, 1), (10.0, -1), (12.0, -1))
    assert slots.overlap(1.0, 6.0) == pytest.approx(2.0 + 1.0)  # B 2..4, C 5..6
    assert slots.overlap(1.0, 1.5) == 0.0  # alone
    assert slots.overlap(2.5, 3.5) == pytest.approx(1.0)  # within B
    assert slots.overlap(5.0, 12.0) == pytest.approx(5.0)  # C alone after A's end at 10


def test_a_request_alone_has_no_overlap_even_with_others_before_and_after() -> None:
    slots = timeline((0.0, 1), (1.0, -1), (2.0, 1), (3.0, -1), (4.0, 1), (5.0, -1))
    assert slots.overlap(2.0, 3.0) == 0.0
    assert slots.overlap(0.0, 5.0) == 0.0  # one at a time throughout


def test_slots_still_limit_concurrency() -> None:
    clock = Clock()

    async def go() -> list[str]:
        slots = Slots(1, clock)
        order = []

        async def user(name: str) -> None:
            async with slots:
                order.append(f"{name}+")
                await asyncio.sleep(0)
                order.append(f"{name}-")

        await asyncio.gather(user("a"), user("b"))
        return order

    assert asyncio.run(go()) == ["a+", "a-", "b+", "b-"]


def test_one_slot_engines_prefill_time_is_not_shared() -> None:
    """`Recorder.prefill_contended`: 0 on an engine that runs one request at a time (the
    others wait outside its prefill time); else the time others held a slot within it."""
    from types import SimpleNamespace

    from workloadlang.run.record import Recorder

    t = [0.0]
    slots = Slots(4, lambda: t[0])

    async def hold() -> None:
        for at in (0.0, 0.5):  # two requests in flight from 0.0 and 0.5, to the end
            t[0] = at
            await slots.acquire()

    asyncio.run(hold())
    o = SimpleNamespace(server_prefill_ms=1000.0, ttft_s=2.0, t_send=0.0)  # prefill 1.0-2.0 s
    shared = SimpleNamespace(slots=slots, prefill_own=False)
    assert Recorder.prefill_contended(shared, o) == pytest.approx(1.0)
    assert Recorder.prefill_contended(SimpleNamespace(slots=slots, prefill_own=True), o) == 0.0
    assert Recorder.prefill_contended(shared, SimpleNamespace(
        server_prefill_ms=None, ttft_s=2.0, t_send=0.0)) is None


def test_reserved_slots_are_held_from_their_take_and_the_rest_given_back() -> None:
    """The run's start reserves its slots before its clock: the timeline shows each from the
    moment its request is written (`take_reserved`), and the ones not taken are free again."""
    clock = Clock()

    async def go() -> tuple[int, bool, list[float], list[int], bool]:
        slots = Slots(3, clock)
        n = await slots.reserve(5)  # only 3 exist
        locked = slots.locked()
        clock.t = 1.0
        slots.take_reserved()
        clock.t = 2.0
        slots.take_reserved()
        slots.unreserve()  # the third was not taken
        free = not slots.locked()
        await slots.acquire()  # the given-back slot
        return n, locked, slots.times, slots.counts, free and slots.locked()

    n, locked, times, counts, refilled = asyncio.run(go())
    assert (n, locked) == (3, True)
    assert (times[:2], counts) == ([1.0, 2.0], [1, 2, 3])
    assert refilled
