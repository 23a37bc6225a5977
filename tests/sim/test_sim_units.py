"""Unit tests of the simulator's pieces: tokenizer/template, block hashes, the prefix cache,
the time model, the slot pool, replies and configuration (no HTTP)."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from workloadlang.sim import PRESETS, SimConfig, add_sim_arguments, config_from_args, parse_fault
from workloadlang.sim.cache import PrefixCache
from workloadlang.sim.replies import find_needle, needle_answer, plan_reply, wrong_code
from workloadlang.sim.timing import SlotPool, decode_seconds, prefill_seconds, restore_seconds
from workloadlang.sim.tokenizer import (
    Renderer,
    chain_hashes,
    render_tokens,
    token_id,
)

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


# ---------------------------------------------------------------- tokenizer and template


def test_template_counts_are_exact():
    user = {"role": "user", "content": "one two  three\nfour"}
    # <|im_start|> system + 5 words + <|im_end|> = 8; user 2 + 4 + 1 = 7; generation prompt 2
    assert len(render_tokens([SYSTEM, user])) == 8 + 7 + 2
    assert render_tokens([user])[-2:] == ["<|im_start|>", "assistant"]
    assert render_tokens([user], add_generation_prompt=False)[-1] == "<|im_end|>"


def test_assistant_reasoning_and_continuation():
    user = {"role": "user", "content": "q"}
    done = {"role": "assistant", "content": "c1 c2", "reasoning_content": "r1 r2 r3"}
    toks = render_tokens([user, done, user])
    i = toks.index("<think>")
    assert toks[i:i + 7] == ["<think>", "r1", "r2", "r3", "</think>", "c1", "c2"]
    assert toks[i + 7] == "<|im_end|>"
    # `reasoning` is read too; a final assistant message is continued (left open, no prompt)
    partial = {"role": "assistant", "content": "", "reasoning": "r1 r2"}
    cont = render_tokens([user, partial])
    assert cont[-5:] == ["assistant", "<think>", "r1", "r2", "</think>"]
    assert "<|im_end|>" not in cont[4:] and len(cont) == 4 + 2 + 4


def test_content_parts_and_bad_messages():
    parts = {"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "text",
                                                                        "text": "c"}]}
    assert len(render_tokens([parts])) == 2 + 3 + 1 + 2
    with pytest.raises(ValueError):
        render_tokens([])
    with pytest.raises(ValueError):
        render_tokens([{"content": "no role"}])


message_st = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]),
     "content": st.text(alphabet="ab \n", max_size=60)},
    optional={"reasoning_content": st.text(alphabet="xy ", max_size=30)},
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(message_st, min_size=1, max_size=6), min_size=1, max_size=4),
       st.integers(1, 8))
def test_incremental_renderer_matches_full_render(conversations, block_size):
    renderer = Renderer(block_size, max_entries=8)
    for messages in conversations:
        for end in range(1, len(messages) + 1):
            prefix = messages[:end]
            full = render_tokens(prefix)
            got = renderer.render(prefix)
            assert got.n == len(full)
            assert got.state.hashes == chain_hashes(full, block_size)
            assert list(got.state.tail) == full[len(full) // block_size * block_size:]


def test_renderer_memoises_prefixes():
    renderer = Renderer(16)
    conv = [SYSTEM, {"role": "user", "content": "w " * 500}]
    renderer.render(conv)
    misses = renderer.memo_misses
    renderer.render(conv + [{"role": "assistant", "content": "x y"},
                            {"role": "user", "content": "more"}])
    assert renderer.memo_misses == misses + 2 and renderer.memo_hits == 2


def test_chain_hashes_are_prefix_sensitive():
    a = [f"t{i}" for i in range(64)]
    b = ["X"] + a[1:]
    ha, hb = chain_hashes(a, 16), chain_hashes(b, 16)
    assert len(ha) == 4 and all(x != y for x, y in zip(ha, hb))
    assert chain_hashes(a[:40], 16) == ha[:2]
    assert token_id("hello") == token_id("hello") != token_id("world")


# ---------------------------------------------------------------- cache


def _blocks(tag: str, n: int) -> list:
    return chain_hashes([f"{tag}{i}" for i in range(16 * n)], 16)


def _fill(cache: PrefixCache, hashes: list, units: int = 1) -> None:
    cache.release(cache.insert(hashes, units))


def test_cache_lru_evicts_oldest_tail_first():
    cache = PrefixCache(16, device_tokens=16 * 10)
    a, b, c = _blocks("a", 4), _blocks("b", 4), _blocks("c", 4)
    _fill(cache, a)
    _fill(cache, b)
    _fill(cache, c)  # 12 blocks > 10: evicts a's two tail blocks
    assert cache.used_tokens == 160 and cache.counters.evicted == 2
    m = cache.match(a)
    assert m.blocks == 2  # head survived: a prefix is evicted from its tail
    cache.release(m.pinned)
    assert cache.match(c).blocks == 4


def test_cache_pinned_blocks_survive_and_block_inserts():
    cache = PrefixCache(16, device_tokens=16 * 4)
    a = _blocks("a", 4)
    pinned = cache.insert(a)
    assert len(pinned) == 4 and cache.pinned_blocks == 4
    b = _blocks("b", 2)
    assert cache.insert(b) == []  # no room: every resident block is pinned
    assert cache.counters.rejected == 1
    cache.release(pinned)
    assert len(cache.insert(b)) == 2


def test_cache_host_tier_restores():
    cache = PrefixCache(16, device_tokens=16 * 4, host_tokens=16 * 4)
    a, b = _blocks("a", 4), _blocks("b", 4)
    _fill(cache, a)
    _fill(cache, b)  # a moves to the host
    assert [cache.contains(h) for h in a] == ["host"] * 4
    m = cache.match(a)
    assert (m.blocks, m.restored) == (4, 4)
    assert [cache.contains(h) for h in b] == ["host"] * 4


def test_cache_duplicate_units_drop_and_evict_unpinned():
    cache = PrefixCache(16, device_tokens=16 * 8)
    a = _blocks("a", 6)
    _fill(cache, a, units=2)
    assert cache.match(a).blocks == 4 and cache.used_tokens == 128  # 4 blocks x 2 units
    cache2 = PrefixCache(16, device_tokens=16 * 8)
    _fill(cache2, a)
    assert cache2.drop(a[:3]) == 3 and cache2.match(a).blocks == 0
    pinned = cache2.insert(_blocks("p", 2))
    assert cache2.evict_unpinned() == 3 and len(cache2.resident) == 2
    cache2.release(pinned)


# ---------------------------------------------------------------- time model and slots


def test_prefill_closed_form_matches_sum():
    us, scale = 3.0, 1000.0
    direct = sum(us * (1 + p / scale) for p in range(200, 700)) / 1e6
    assert prefill_seconds(200, 700, us, scale) == pytest.approx(direct)
    assert prefill_seconds(0, 100, us, 0) == pytest.approx(300e-6)
    assert prefill_seconds(5, 5, us, scale) == 0.0
    # the per-token cost grows with position: a later window costs more
    assert prefill_seconds(9000, 10000, us, scale) > 2 * prefill_seconds(0, 1000, us, scale)
    assert decode_seconds(1000, 100, 1000) == pytest.approx(200e-6)
    assert restore_seconds(100, 2.0) == pytest.approx(200e-6) and restore_seconds(0, 2) == 0


def test_slot_pool_is_fifo_and_cancel_safe():
    async def main():
        pool = SlotPool(1)
        order = []
        await pool.acquire()

        async def worker(i):
            await pool.acquire()
            order.append(i)
            await asyncio.sleep(0.001)
            pool.release()

        tasks = [asyncio.ensure_future(worker(i)) for i in range(4)]
        await asyncio.sleep(0.01)
        assert pool.waiting == 4
        tasks[1].cancel()
        await asyncio.sleep(0)
        pool.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order, pool.free

    order, free = asyncio.run(main())
    assert order == [0, 2, 3] and free == 1


# ---------------------------------------------------------------- replies


def _needle_prompt(words_before: int, words_after: int, ask: bool = True):
    hay = " ".join(["hay"] * words_before) + " [the secret code is kestrel-4821] "
    hay += " ".join(["hay"] * words_after)
    question = "\n\nWhat is the secret code hidden in the text above?" if ask else ""
    return Renderer(16).render([SYSTEM, {"role": "user", "content": hay + question}])


def test_needle_position_and_answers():
    r = _needle_prompt(100, 50)
    code, pos = find_needle(r)
    assert code == "kestrel-4821"
    assert pos == 8 + 2 + 100  # system message, `<|im_start|> user`, 100 words
    assert needle_answer(r, window=r.n) == "[kestrel-4821]"
    wrong = needle_answer(r, window=r.n - pos - 1)
    assert wrong == f"[{wrong_code('kestrel-4821')}]" and wrong != "[kestrel-4821]"
    assert needle_answer(_needle_prompt(10, 10, ask=False), window=10**6) is None


def test_reply_plan_split_and_determinism():
    r = Renderer(16).render([SYSTEM, {"role": "user", "content": "hello there"}])
    plan = plan_reply(r, budget=30, thinking=True, think_tokens=20, window=10**6, config_seed=0)
    words = list(plan.words())
    assert [k for k, _ in words] == ["reasoning"] * 20 + ["content"] * 10
    again = plan_reply(r, budget=30, thinking=True, think_tokens=20, window=10**6, config_seed=0)
    assert list(again.words()) == words
    short = plan_reply(r, budget=5, thinking=True, think_tokens=20, window=10**6, config_seed=0)
    assert (short.reasoning_n, short.content_n) == (5, 0)
    needle = plan_reply(_needle_prompt(5, 5), 128, False, 20, 10**6, 0)
    assert list(needle.words()) == [("content", "[kestrel-4821]")]
    assert needle.finish_reason == "stop"


# ---------------------------------------------------------------- config


def test_parse_fault_forms():
    f = parse_fault("error_rate=0.25@main,sub#2")
    assert (f.name, f.value, f.sessions) == ("error_rate", 0.25, ("main", "sub#2"))
    assert f.applies_to("main#1") and f.applies_to("sub#2") and not f.applies_to("sub#1")
    assert not f.applies_to(None)
    assert parse_fault("drop_aborted").applies_to(None)
    assert parse_fault("evict-over-concurrency=2").render() == "evict_over_concurrency=2"
    for bad in ("nope", "degraded=3", "error_rate", "error_rate=2"):
        with pytest.raises(ValueError):
            parse_fault(bad)


def test_args_roundtrip_with_prefix():
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser, prefix="sim-")
    ns = parser.parse_args(["--sim-preset", "cache-pressure", "--sim-device-tokens", "4096",
                            "--sim-fault", "degraded@main", "--sim-fault", "error_rate=0.1"])
    cfg = config_from_args(ns)
    assert cfg.device_tokens == 4096
    assert cfg.host_tokens == PRESETS["cache-pressure"].host_tokens
    assert [f.render() for f in cfg.faults] == ["degraded@main", "error_rate=0.1"]
    plain = argparse.ArgumentParser()
    add_sim_arguments(plain)
    assert config_from_args(plain.parse_args([])) == PRESETS["default"]
    with pytest.raises(ValueError):
        config_from_args(plain.parse_args(["--block-size", "0"]))


def test_presets_are_named_and_frozen():
    assert set(PRESETS) == {"default", "cache-pressure", "needle-test", "agent-sim", "abort-sim",
                            "perf-sim", "chat-rate"}
    with pytest.raises(ValidationError, match="frozen"):
        PRESETS["default"].block_size = 8  # type: ignore[misc]
    needle = PRESETS["needle-test"]
    # every length fits; the 80 %-deep needle of 200k (40k from the end) is inside the window,
    # the one of 300k (60k from the end) is not
    assert needle.max_model_len > 450_000 + 1000 and 40_000 < needle.window < 60_000
    assert SimConfig(effective_context=None).window == SimConfig().max_model_len


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["run", "start", "finish", "drop", "evict"]),
                          st.integers(0, 5), st.integers(1, 6), st.integers(1, 2)),
                max_size=40),
       st.integers(2, 12), st.integers(0, 6))
def test_cache_invariants_under_random_operations(ops, device_blocks, host_blocks):
    """Capacity is never exceeded, pinned blocks are never evicted, the bookkeeping agrees,
    and a match is always a leading run of cached blocks."""
    cache = PrefixCache(16, device_tokens=16 * device_blocks, host_tokens=16 * host_blocks)
    prefixes = [_blocks(f"p{i}", 6) for i in range(6)]
    held: list = []  # pinned hash lists of "active requests"
    for op, which, length, units in ops:
        hashes = prefixes[which][:length]
        if op == "run":
            m = cache.match(hashes)
            assert hashes[:m.blocks] == m.pinned
            cache.release(m.pinned + cache.insert(hashes[m.blocks:], units))
        elif op == "start":
            m = cache.match(hashes)
            held.append(m.pinned + cache.insert(hashes[m.blocks:], units))
        elif op == "finish" and held:
            cache.release(held.pop(0))
        elif op == "drop":
            cache.drop(hashes)
        elif op == "evict":
            cache.evict_unpinned()
        for pinned in held:
            assert all(cache.contains(h) == "device" and cache.pinned(h) for h in pinned)
        assert cache.used_units == sum(cache.resident.values()) <= device_blocks
        assert set(cache.lru) == set(cache.resident)
        assert cache.host_used_units == sum(cache.host.values()) <= host_blocks
        assert not set(cache.host) & set(cache.resident)
    for pinned in held:
        cache.release(pinned)
    assert cache.pinned_blocks == 0


def test_prompt_ms_is_the_modelled_prefill_not_the_simulators_own_lag():
    """A saturated simulator process (here: its event loop blocked for 150 ms during a 20 ms
    prefill) must not report that lag as the engine's prefill time: `prompt_ms` is the model,
    `prompt_wall_ms` shows the lag."""
    import time

    from workloadlang.sim.engine import Simulator

    sim = Simulator(SimConfig(prefill_us_per_token=20.0, prefill_ctx_scale=0, decode_us_per_token=0))
    body = {"messages": [{"role": "user", "content": " ".join(["w"] * 997)}], "max_tokens": 1}

    async def scenario() -> dict:
        job = sim.prepare(body, None, None, time.perf_counter())

        async def block() -> None:
            await asyncio.sleep(0.005)
            time.sleep(0.15)

        blocker = asyncio.ensure_future(block())
        async for _ in sim.run(job):
            pass
        await blocker
        return job.timings()

    timings = asyncio.run(scenario())
    assert 15 < timings["prompt_ms"] < 25
    assert timings["prompt_wall_ms"] >= 150


def test_the_first_token_cost_is_in_the_ttft_not_in_the_reported_prefill_time():
    """`first_token_us`: what any request costs before its first token besides its prefill
    (a real engine's scheduling and first decode step). The TTFT holds it; `prompt_ms`, the
    engine's own prefill time, does not."""
    import time

    from workloadlang.sim.engine import Simulator

    body = {"messages": [{"role": "user", "content": " ".join(["w"] * 997)}], "max_tokens": 2}

    def timings(first_token_us: float) -> dict:
        sim = Simulator(SimConfig(prefill_us_per_token=20.0, prefill_ctx_scale=0,
                                  decode_us_per_token=0, first_token_us=first_token_us))

        async def scenario() -> dict:
            job = sim.prepare(body, None, None, time.perf_counter())
            async for _ in sim.run(job):
                pass
            return job.timings()

        return asyncio.run(scenario())

    plain, fixed = timings(0.0), timings(30_000.0)
    assert 15 < plain["prompt_ms"] < 25 and 15 < fixed["prompt_ms"] < 25
    assert fixed["ttft_ms"] - fixed["prompt_ms"] >= 29 > plain["ttft_ms"] - plain["prompt_ms"]


def test_the_emission_log_keeps_a_time_per_token_of_the_last_requests():
    from workloadlang.sim.emissions import EmissionLog

    log = EmissionLog(2)
    log.wrote("a", 1, 1.0)
    log.wrote("a", 3, 1.5)  # three tokens in one write: one time each
    log.wrote("b", 2, 2.0)
    assert log.snapshot() == {"a": [1.0, 1.5, 1.5, 1.5], "b": [2.0, 2.0]}
    log.wrote("c", 1, 3.0)  # a third request: the oldest goes
    assert list(log.snapshot()) == ["b", "c"]
    off = EmissionLog(0)
    off.wrote("a", 5, 1.0)
    assert off.snapshot() == {}
