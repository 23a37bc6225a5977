"""run: the time budget (`--time-budget`) ends a run whatever it waits on: a `wait`, an arrival
(`arrive every`, with and without a `concurrency` cap), a trace record's time. What it kept
from being sent is recorded as not sent (`skipped: time budget exhausted`), what was sent is
kept, and the run is incomplete.

The executor runs on an injected clock whose `sleep` moves it on (a wait of 100 s takes no
time; waits of the run side by side add up on it, so each case's waits all pass the budget):
the run must end within one second of its 5 s budget, on that clock.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from runexec import execute, plan_of

BUDGET = 5.0


class Clock:
    """A clock that only `sleep` moves on (and a little every read, as time passes)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def run(text: str, **params: str):
    """Run `text` with a 5 s budget on the injected clock. Output: (result, clock)."""
    clock = Clock()
    result, _ = execute(plan_of(text, **params), ahead=False, clock=clock, sleep=clock.sleep,
                        time_budget_s=BUDGET)
    return result, clock


def ended_in_time(result, clock: Clock) -> None:
    assert result.incomplete == "time budget exhausted"
    assert result.elapsed_s <= BUDGET + 1, result.elapsed_s
    assert max(clock.slept, default=0) <= BUDGET + 1e-3, clock.slept  # no 100 s sleep at all


def test_a_wait_longer_than_the_budget_ends_with_it():
    """`wait 100s` with `--time-budget 5` was still running at 60 s."""
    result, clock = run('workload w { session s { user "a"; reply 1; wait 100s; user "b"; '
                        'reply 1; user "c"; reply 1 } }')
    ended_in_time(result, clock)
    first, *rest = result.records
    assert first.skipped is None and first.error is None
    assert [r.skipped for r in rest] == ["time budget exhausted"] * 2


@pytest.mark.parametrize("cap", ["", "concurrency 1"])
def test_arrivals_after_the_budget_are_not_sent(cap: str):
    result, clock = run(f'workload w {{ session s repeat 3 arrive every 100s {cap} '
                        '{ user "a"; reply 1 } }')
    ended_in_time(result, clock)
    assert [r.skipped for r in result.records] == [None, "time budget exhausted",
                                                   "time budget exhausted"]


def test_a_trace_record_due_after_the_budget_is_not_sent(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 100,
                                         "output_length": 4, "hash_ids": [k]}) + "\n"
                             for k, t in enumerate([0, 100_000])))  # ms: at 0 s and 100 s
    result, clock = run(f'workload w {{ session t trace "{trace}" }}')
    ended_in_time(result, clock)
    assert [r.skipped for r in result.records] == [None, "time budget exhausted"]


def test_without_a_budget_the_wait_is_slept_whole():
    clock = Clock()
    result, _ = execute(plan_of('workload w { session s { user "a"; reply 1; wait 100s; '
                                'user "b"; reply 1 } }'), ahead=False, clock=clock,
                        sleep=clock.sleep)
    assert result.incomplete is None and [r.skipped for r in result.records] == [None, None]
    assert sum(clock.slept) == pytest.approx(100, abs=1e-3)
