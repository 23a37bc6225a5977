"""A run says what it is doing while it sizes its requests' text before the clock starts (a
long trace takes a while): notes on the sink after a second, every five, and when done; none
for a run that is ready at once. The clock is injected: each request's sizing takes 0.5 s."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from workloadlang.console.lines import event_line
from workloadlang.console.live import RunState, apply_event
from workloadlang.results import ListSink
from workloadlang.run.maker import RequestMaker


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class SlowRealiser:
    """Sizes a request in `cost` seconds of the injected clock."""

    def __init__(self, clock: Clock, cost: float) -> None:
        self.clock, self.cost = clock, cost

    async def prepare(self, req) -> None:
        self.clock.t += self.cost


def notes(n: int, cost: float) -> list[dict]:
    clock = Clock()
    maker = RequestMaker(SlowRealiser(clock, cost), endpoint=None, clock=clock, timeout_s=60)
    sink = ListSink()
    reqs = [[SimpleNamespace(id=f"r{k}")] for k in range(n)]
    asyncio.run(maker.size_all(reqs, sink))
    return [data for kind, data in sink.events if kind == "note"]


def test_a_long_preparation_says_so_and_when_it_is_done():
    got = notes(40, 0.5)  # 20 s in all
    assert [d["preparing"] for d in got] == [[2, 40], [12, 40], [22, 40], [32, 40], [40, 40]]
    assert got[0]["message"] == ("preparing the text of 40 requests before the clock starts "
                                 "(sizing it with the engine's tokenizer): 2 done in 1.0 s")
    assert got[1]["message"] == "preparing the text: 12 of 40 requests done in 6.0 s"
    assert got[-1]["message"] == ("the text of 40 requests is ready (sized in 20.0 s): the run "
                                  "starts")
    assert event_line("note", got[0]).startswith("note: preparing the text of 40 requests")


def test_a_quick_preparation_says_nothing():
    assert notes(40, 0.01) == []


def test_the_live_view_shows_the_preparation_as_its_stage():
    state = RunState(workload="w", hit_ratio=0.5, phases=(), total=40, sessions={})
    got = notes(40, 0.5)
    apply_event(state, "calibration", {})
    apply_event(state, "note", got[1])
    assert state.stage == "preparing text 12/40"
    apply_event(state, "note", got[-1])
    assert state.stage == "running"
