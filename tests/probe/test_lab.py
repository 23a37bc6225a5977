"""The probe's runs send every request they plan once: the hypothesis caches model each request
the engine sees, so a request measured again (the runner's `run/remeasure.py`, for a machine
that ran slower meanwhile) would be one they do not model, and a cold first send measured
again would be kept as a hit."""

from __future__ import annotations

import asyncio

from workloadlang import api
from workloadlang.probe.lab import Lab, ProbeOptions
from workloadlang.sim import SimConfig, start_in_process


def test_a_drifting_machine_gets_each_planned_request_once():
    # the machine runs 30 times slower over the third send: its decode is far slower than its
    # stretch's first one's, which would have it measured again
    cfg = SimConfig(max_model_len=16384, decode_us_per_token=1000.0).with_faults(
        "drift=30@*/send/2")
    params = {"order": "given", "context_tokens": 256, "sends": ["a", "b", "c", "a"],
              "reads": [], "kept": "0.9", "answer_tokens": 16}

    async def go():
        with start_in_process(cfg) as sim:
            async with api.open_engine(sim.base_url) as engine:
                lab = Lab(engine, ProbeOptions(salt="once"))
                records = await lab.run("capacity", params, "once", worst_tokens=10**6)
                return records, lab

    records, lab = asyncio.run(go())
    sent = [r for r in records if not r.skipped]
    assert len(sent) == 4 and all(not r.remeasured for r in sent)
    assert lab.cost.requests == 4
    assert [r.cached_tokens == 0 or r.cached_tokens <= 16 for r in sent[:3]] == [True] * 3
