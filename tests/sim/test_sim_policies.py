"""The simulator's cache knobs: eviction order (LRU, FIFO, LFU; tail- or head-first within a
sequence), the idle lifetime, and what a cut request leaves cached (`prefill_abort`,
`decode_abort`); the `corrupt_restored` fault. Cache-level tests drive `PrefixCache` with an
injected clock; the request-level ones go through the engine over HTTP on loopback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloadlang.sim import SimConfig, parse_fault
from workloadlang.sim.cache import PrefixCache
from workloadlang.sim.config import config_from_args
from workloadlang.sim.tokenizer import chain_hashes


def blocks(tag: str, n: int) -> list:
    return chain_hashes([f"{tag}{i}" for i in range(16 * n)], 16)


def run(cache: PrefixCache, hashes: list) -> int:
    """One request over `hashes`: match, insert the rest, release. Output: blocks matched."""
    since = cache.placements
    m = cache.match(hashes)
    cache.release(m.pinned + cache.insert(hashes[m.blocks:]), since)
    return m.blocks


def cache(eviction: str = "lru", first: str = "tail", blocks_: int = 8, **kw) -> PrefixCache:
    return PrefixCache(16, 16 * blocks_, eviction=eviction, tail_first=first == "tail", **kw)


def test_lru_keeps_what_was_used_and_fifo_does_not():
    a, b, c = blocks("a", 4), blocks("b", 4), blocks("c", 4)
    lru, fifo = cache("lru"), cache("fifo")
    for k in (lru, fifo):
        run(k, a), run(k, b), run(k, a)  # a hit: a is the most recent, still the oldest placed
        run(k, c)  # 12 blocks > 8
    assert run(lru, a) == 4 and lru.match(b).blocks == 0
    assert fifo.match(a).blocks == 0 and fifo.match(b).blocks == 4


def test_lfu_evicts_the_least_hit_even_when_it_is_the_newest():
    a, b, c, d = blocks("a", 3), blocks("b", 3), blocks("c", 2), blocks("d", 2)
    k = cache("lfu", blocks_=8)
    run(k, a), run(k, a), run(k, a)  # a: 3 uses, the least recent of all below
    run(k, b), run(k, b)  # b: 2 uses
    run(k, c)  # c: 1 use, the most recent
    run(k, d)  # 10 blocks > 8: two of c's go (the fewest uses), not a's (the oldest use)
    assert k.match(a).blocks == 3 and k.match(b).blocks == 3
    assert k.match(c).blocks == 0


@pytest.mark.parametrize("eviction", ["lru", "fifo", "lfu"])
@pytest.mark.parametrize("first", ["tail", "head"])
def test_a_partly_evicted_prefix_keeps_its_head_only_when_the_tail_goes_first(eviction, first):
    a, b = blocks("a", 4), blocks("b", 6)
    k = cache(eviction, first)
    run(k, a)
    run(k, b)  # 10 blocks > 8: two of a's go
    assert len([h for h in a if k.contains(h)]) == 2
    assert k.match(a).blocks == (2 if first == "tail" else 0)


def test_the_idle_lifetime_drops_blocks_unused_for_longer():
    now = [0.0]
    k = PrefixCache(16, 16 * 64, 16 * 64, idle_ttl_s=5.0, clock=lambda: now[0])
    a, b = blocks("a", 4), blocks("b", 4)
    run(k, a)
    now[0] = 3.0
    run(k, b)
    now[0] = 7.0  # a unused for 7 s, b for 4 s
    assert k.match(a).blocks == 0 and k.counters.expired == 4
    assert k.match(b).blocks == 4
    assert PrefixCache(16, 16 * 8, clock=lambda: 1e9).expire() == 0  # no lifetime


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["run", "start", "finish", "tick"]),
                          st.integers(0, 5), st.integers(1, 6)), max_size=40),
       st.sampled_from(["lru", "fifo", "lfu"]), st.booleans(), st.integers(2, 12),
       st.integers(0, 6), st.sampled_from([0.0, 2.0]))
def test_every_order_keeps_the_cache_sound(ops, eviction, tail_first, device, host, ttl):
    """Capacity is never exceeded, pinned blocks stay, and a match is a leading run of blocks,
    under every order, with or without a host tier and an idle lifetime."""
    now = [0.0]
    k = PrefixCache(16, 16 * device, 16 * host, eviction=eviction, tail_first=tail_first,
                    idle_ttl_s=ttl, clock=lambda: now[0])
    prefixes = [blocks(f"p{i}", 6) for i in range(6)]
    held: list = []
    for op, which, length in ops:
        hashes = prefixes[which][:length]
        if op in ("run", "start"):
            since = k.placements
            m = k.match(hashes)
            assert hashes[:m.blocks] == m.pinned
            pinned = m.pinned + k.insert(hashes[m.blocks:])
            k.release(pinned, since) if op == "run" else held.append((pinned, since))
        elif op == "finish" and held:
            k.release(*held.pop(0))
        elif op == "tick":
            now[0] += 1.0
        for pinned, _ in held:
            assert all(k.contains(h) == "device" and k.pinned(h) for h in pinned)
        assert k.used_units == sum(k.resident.values()) <= device
        assert set(k.lru) == set(k.resident)
        assert k.host_used_units == sum(k.host.values()) <= host
        assert not set(k.host) & set(k.resident)


def test_the_knobs_are_flags_and_checked():
    import argparse

    from workloadlang.sim import add_sim_arguments

    ap = argparse.ArgumentParser()
    add_sim_arguments(ap, "sim-")
    ns = ap.parse_args(["--sim-eviction", "lfu", "--sim-evict-first", "head",
                        "--sim-idle-ttl-s", "2.5", "--sim-prefill-abort", "keep",
                        "--sim-decode-abort", "prompt", "--sim-fault", "corrupt_restored=3"])
    cfg = config_from_args(ns)
    assert (cfg.eviction, cfg.evict_first, cfg.idle_ttl_s) == ("lfu", "head", 2.5)
    assert (cfg.prefill_abort, cfg.decode_abort) == ("keep", "prompt")
    assert cfg.faults[0].render() == "corrupt_restored=3"
    with pytest.raises(ValueError):
        SimConfig(eviction="random")
    for bad in ("corrupt_restored", "corrupt_restored=-1", "corrupt_restored=1.5"):
        with pytest.raises(ValueError):
            parse_fault(bad)


# ---------------------------------------------------------------- through the engine

def chat(h, messages, max_tokens=1) -> dict:
    """A streamed chat completion. Output: {"cached", "prompt", "content"}."""
    import json

    import httpx

    payload = {"messages": messages, "max_tokens": max_tokens, "stream": True,
               "stream_options": {"include_usage": True}}
    r = httpx.post(f"{h.base_url}/chat/completions", json=payload, timeout=30)
    out, words = {}, []
    for line in r.text.split("\n"):
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            usage = chunk.get("usage")
            if usage:
                out = {"cached": usage["prompt_tokens_details"]["cached_tokens"],
                       "prompt": usage["prompt_tokens"]}
            for c in chunk.get("choices", []):
                words.append(c["delta"].get("content") or "")
    return {**out, "content": "".join(words).split()}


def cut(h, messages, after_s: float | None = None, tokens: int | None = None) -> list:
    """Stream `messages` and close the connection after `after_s` seconds (during the prefill)
    or after `tokens` content chunks (during the decode); wait until the server saw it.
    Output: the words received."""
    import json
    import time

    import httpx

    def seen() -> int:
        c = httpx.get(f"{h.root_url}/sim/state").json()["counters"]
        return c["aborted"] + c["cancelled"]

    before, words = seen(), []
    payload = {"messages": messages, "max_tokens": 5000, "stream": True}
    with httpx.Client(timeout=httpx.Timeout(30, read=after_s)) as client:
        try:
            with client.stream("POST", f"{h.base_url}/chat/completions", json=payload) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        for c in json.loads(line[6:])["choices"]:
                            words += (c["delta"].get("content") or "").split()
                    if tokens is not None and len(words) >= tokens:
                        break
        except httpx.ReadTimeout:
            pass
    deadline = time.monotonic() + 5
    while seen() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return words


def user(tag: str, n: int) -> list:
    return [{"role": "user", "content": " ".join(f"{tag}{i}" for i in range(n))}]


@pytest.fixture
def engine():
    from workloadlang.sim import start_in_thread

    handles = []

    def start(*faults: str, **knobs):
        handles.append(start_in_thread(SimConfig(**knobs, faults=tuple(map(parse_fault, faults)))))
        return handles[-1]

    yield start
    for h in handles:
        h.stop()


@pytest.mark.alone
@pytest.mark.parametrize("keep", ["drop", "keep"])
def test_a_cut_during_prefill_keeps_what_was_prefilled_only_when_asked(engine, keep):
    h = engine(prefill_abort=keep, prefill_us_per_token=400.0, prefill_ctx_scale=0)
    prompt = user("p", 2000)  # 0.8 s of prefill, cut after 0.3 s
    cut(h, prompt, after_s=0.3)
    served = chat(h, prompt)
    if keep == "drop":
        assert served["cached"] == 0
    else:
        assert 0.2 * served["prompt"] < served["cached"] < 0.8 * served["prompt"]
        assert served["cached"] % 16 == 0


@pytest.mark.alone
@pytest.mark.parametrize(("keep", "expect"), [("keep", "all"), ("prompt", "prompt"),
                                              ("drop", "none")])
def test_a_cut_during_decode_keeps_what_decode_abort_says(engine, keep, expect):
    h = engine(decode_abort=keep, prefill_us_per_token=0.0, decode_us_per_token=2000.0)
    prompt = user("d", 400)  # 405 tokens with the template, the generation prompt included
    said = cut(h, prompt, tokens=40)
    resumed = chat(h, prompt + [{"role": "assistant", "content": " ".join(said)},
                                *user("more", 50)])
    kept = {"all": (405 + len(said)) // 16 * 16, "prompt": 405 // 16 * 16, "none": 0}
    assert len(said) >= 40 and resumed["cached"] == kept[expect]


def test_a_context_restored_from_the_host_answers_otherwise_under_corrupt_restored(engine):
    h = engine("corrupt_restored=5", prefill_us_per_token=0.0, decode_us_per_token=0.0,
               device_tokens=1024, host_tokens=4096, host_restore_us_per_token=0.0)
    first = user("f", 800)
    cold = chat(h, first, max_tokens=12)["content"]
    device = chat(h, first, max_tokens=12)["content"]
    chat(h, user("s", 800))  # pushes `first` to the host
    restored = chat(h, first, max_tokens=12)["content"]
    assert cold == device and len(cold) == 12
    assert restored[:5] == cold[:5] and all(a != b for a, b in zip(restored[5:], cold[5:]))
