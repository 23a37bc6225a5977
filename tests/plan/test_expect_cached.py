"""`probe ... expect cached`: a prompt an earlier run sent. The plan expects all of it but its
last token from cache (so `until miss` can stop at the first one the engine no longer holds),
and a run against the simulator stops there."""

from __future__ import annotations

import asyncio

import pytest

from workloadlang import api
from workloadlang.diagnostics import WorkloadError
from workloadlang.sim import SimConfig, start_in_thread

WL = """
workload reread {
  params { tags: string list = ["a", "b", "c"]; warm: bool = true }
  text body = filler 300
  session main {
    for t in $tags until miss label read {
      fresh { system $t, " ", $body; if $warm { probe expect cached } else { probe } }
    }
  }
}
"""
SOURCE = api.Source(name="reread.wl", text=WL)


def plan(**params: str) -> api.Plan:
    return api.make_plan(api.parse_checked(SOURCE), SOURCE, params, salt="s")


def test_the_plan_expects_all_but_the_last_token_of_a_prompt_sent_before():
    warm, cold = plan(), plan(warm="false")
    assert [r.expected_cached for r in warm.requests] == [r.prompt_tokens - 1
                                                         for r in warm.requests]
    assert all(r.expected_cached <= 3 for r in cold.requests)  # a message header at most
    assert all(r.expected_cached_max is None for r in warm.requests)


def test_expect_cached_is_one_clause():
    bad = api.Source("b.wl", "workload b { session s { user \"x\"; probe expect cached "
                             "expect cached } }")
    with pytest.raises(WorkloadError) as e:
        api.parse_checked(bad)
    assert e.value.diagnostics[0].code == "WL107"


def test_a_run_stops_at_the_first_prompt_the_engine_no_longer_holds():
    async def go():
        with start_in_thread(SimConfig(prefill_us_per_token=0, decode_us_per_token=0)) as sim:
            async with api.open_engine(sim.base_url, sim=True) as engine:
                env = {"max_context": engine.info.max_context}
                fill = api.make_plan(api.parse_checked(SOURCE), SOURCE,
                                     {"tags": "a,c", "warm": "false"}, salt="s", env=env)
                await api.run_workload(fill, engine)  # the engine holds a and c, not b
                read = api.make_plan(api.parse_checked(SOURCE), SOURCE, {}, salt="s", env=env)
                return await api.run_workload(read, engine)

    results = asyncio.run(go())
    a, b, c = results.records
    assert a.hit is True and a.cached_tokens == a.prompt_tokens - 1 - (a.prompt_tokens - 1) % 16
    assert b.hit is False and b.cached_tokens == 0
    assert c.skipped and "until miss" in c.skipped
