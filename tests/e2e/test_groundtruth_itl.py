"""Ground truth for ITL and TPOT: what `wl run` records against the simulator's own emission
times (its emission log) at a known decode step of 5 ms, each gap to a tenth of a millisecond.
At that scale another test's process on the same CPUs moves the simulator's steps, so it runs
with nothing else of the suite in flight."""

from __future__ import annotations

import asyncio
import statistics

import httpx
import pytest

from workloadlang import api
from workloadlang.results import ListSink
from workloadlang.sim import SimConfig, start_in_process

pytestmark = pytest.mark.alone  # it reads time to 0.1 ms: nothing else of the suite in flight


STREAMS = """
workload streams {
  concurrency = 8
  session s repeat 8 { user "Tell me a story."; reply 40 label story }
}
"""


def test_client_itl_and_tpot_match_the_simulators_emission_times() -> None:
    cfg = SimConfig(prefill_us_per_token=0, decode_us_per_token=5000, slots=16, emission_log=64)

    async def go(base: str) -> ListSink:
        source = api.Source(name="streams.wl", text=STREAMS)
        plan = api.make_plan(api.parse_checked(source), source, {}, salt="itl",
                             env={"max_context": 65536})
        sink = ListSink()
        async with api.open_engine(base, sim=True) as engine:
            await api.run_workload(plan, engine, sink)
        return sink

    with start_in_process(cfg) as sim:
        sink = asyncio.run(go(sim.base_url))
        emitted = httpx.get(f"{sim.root_url}/sim/emissions").json()["requests"]
    errors, client, server, tpots = [], [], [], []
    for r in sink.records:
        times = emitted[r.id]
        assert len(times) == 40 and len(r.itl_s) == 39, r.id
        gaps = [b - a for a, b in zip(times, times[1:])]
        errors += [abs(c - s) for c, s in zip(r.itl_s, gaps)]
        client += r.itl_s
        server += gaps
        tpots.append((r.tpot_s, (times[-1] - times[0]) / 39))
    assert len(errors) == 8 * 39
    # the decode step is 5 ms: both sides see it, and the client each gap as the server wrote it
    assert statistics.median(server) == pytest.approx(0.005, abs=0.0005)
    assert statistics.median(client) == pytest.approx(statistics.median(server), abs=1e-4)
    assert statistics.median(errors) < 1e-4
    for mine, theirs in tpots:  # TPOT runs to the answer's end: at most a read later
        assert mine == pytest.approx(theirs, abs=0.002)
