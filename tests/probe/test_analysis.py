"""The probe's analysis, piece by piece, on made-up records and caches: the block size from
re-sent prompts, the cold price's square term, price groups (device, host, noise), the fit of
eviction orders and capacities to counts the simulator's cache gave, and the naive
bisection's cost."""

from __future__ import annotations

import pytest

from workloadlang.probe.capacity_props import naive_bisection
from workloadlang.probe.fit import fit_all
from workloadlang.probe.granularity import block_size, quadratic
from workloadlang.probe.hypotheses import Prompt
from workloadlang.probe.prices import classify
from workloadlang.results import Record
from workloadlang.sim.cache import PrefixCache


def rec(i: int, **kw) -> Record:
    base = dict(id=f"r{i}", seq=i, session="main#0", phase="", label="again", index=i,
                kind="probe", line=1, planned_prompt_tokens=100, planned_expected_cached=0,
                new_tokens=0, max_tokens=1)
    return Record(**{**base, **kw})


@pytest.mark.parametrize("block", [1, 2, 4, 16, 32, 64, 128, 256])
def test_the_block_size_is_the_common_divisor_of_what_re_sent_prompts_are_served(block):
    from workloadlang.probe.granularity import SIZES

    again = []
    for i, n in enumerate(SIZES):
        prompt = n + 5  # the simulator's template around a system message
        again.append(rec(i, prompt_tokens=prompt, cached_tokens=(prompt - 1) // block * block))
    assert block_size(again) == block


def test_served_counts_of_no_one_block_size_give_none():
    again = [rec(0, prompt_tokens=300, cached_tokens=288), rec(1, prompt_tokens=500,
                                                              cached_tokens=100)]
    assert block_size(again) is None


def test_the_cold_price_keeps_its_square_term():
    b, c = 2e-6, 3e-10
    samples = [(n, b * n + c * n * n) for n in (128, 400, 780, 1100)]
    fb, fc = quadratic(samples)
    assert fb == pytest.approx(b, rel=1e-6) and fc == pytest.approx(c, rel=1e-6)
    assert quadratic(samples[:2]) == (0.0, 0.0)


def timed(i: int, ms: float) -> Record:
    return rec(i, prompt_tokens=1031, cached_tokens=1024, server_prefill_ms=ms, ttft_s=ms / 1e3)


def test_a_slower_group_at_the_end_of_a_walk_is_a_host_tier():
    walk = [timed(i, 0.05) for i in range(6)] + [timed(6, 6.0)] + \
        [timed(i, 10.3) for i in range(7, 10)]
    tiers = classify(walk)
    assert tiers.host and tiers.signal == "server"
    assert tiers.host_s == pytest.approx(0.0103)
    assert [tiers.tier[r.id] for r in walk] == ["device"] * 6 + ["split"] + ["host"] * 3
    assert tiers.restored["r6"] == pytest.approx((6.0 - 0.05) / (10.3 - 0.05))


def test_a_lone_slow_read_among_fast_ones_is_noise_not_a_tier():
    walk = [timed(i, 0.05) for i in range(4)] + [timed(4, 9.0)] + \
        [timed(i, 0.05) for i in range(5, 9)]
    assert not classify(walk).host


def loaded(i: int, ttft_ms: float, server_ms: float | None = 0.05) -> Record:
    """A device read whose TTFT a CPU load stretched: the engine's own prefill time is not."""
    return rec(i, prompt_tokens=1031, cached_tokens=1024, server_prefill_ms=server_ms,
               ttft_s=ttft_ms / 1e3)


def test_a_load_that_slows_the_end_of_a_walk_is_not_a_host_tier():
    # the engine's prefill time is flat; a load from the 7th read on stretches every TTFT by
    # 6 ms, the read's and its repeat's alike: priced against its repeat, no read is dearer
    walk = [loaded(i, 1.0) for i in range(6)] + [loaded(i, 7.0) for i in range(6, 10)]
    refs = {r.id: loaded(100 + r.index, r.ttft_s * 1e3 + 0.02) for r in walk}
    tiers = classify(walk, refs)
    assert not tiers.host and tiers.doubt is None
    assert set(tiers.tier.values()) == {"device"}


def test_a_slower_tier_seen_only_by_the_ttft_in_one_read_is_doubted():
    # the engine reports no prefill time; the TTFT shows one dearer read at the end, not beyond
    # the noise measured in the same walk (a repeat 0.9 ms late): no tier named, and why
    walk = [loaded(i, 1.0, None) for i in range(8)] + [loaded(8, 2.6, None)]
    refs = {r.id: loaded(100 + r.index, 1.9 if r.index == 3 else 1.0, None) for r in walk}
    tiers = classify(walk, refs)
    assert not tiers.host
    assert tiers.doubt and "not seen consistently" in tiers.doubt


def test_a_host_tier_seen_only_by_the_ttft_is_named_when_seen_consistently():
    # an engine that reports no prefill time of its own: the TTFT shows a restore, read after
    # read, against each read's repeat
    walk = [loaded(i, 1.0 + 0.1 * (i % 2), None) for i in range(6)] + \
        [loaded(i, 9.0, None) for i in range(6, 9)]
    refs = {r.id: loaded(100 + r.index, 1.0, None) for r in walk}
    tiers = classify(walk, refs)
    assert tiers.host and tiers.signal == "ttft" and tiers.doubt is None
    assert [tiers.tier[r.id] for r in walk[6:]] == ["host"] * 3
    assert all(tiers.tier[ref.id] == "device" for ref in refs.values())


def test_a_tier_only_the_ttft_shows_where_the_engines_prefill_time_is_flat_is_not_named():
    # the same reads from an engine whose own prefill time is flat: a restore that time leaves
    # out and a load that slowed the client look alike, so the card names none, and says why
    walk = [loaded(i, 1.0 + 0.1 * (i % 2)) for i in range(6)] + [loaded(i, 9.0) for i in
                                                                 range(6, 9)]
    refs = {r.id: loaded(100 + r.index, 1.0) for r in walk}
    tiers = classify(walk, refs)
    assert not tiers.host and tiers.signal == "server"
    assert tiers.doubt and "engine's own prefill time showed no slower tier" in tiers.doubt


def test_the_cold_price_is_the_engines_prefill_time_when_it_reports_one():
    from workloadlang.probe.prices import Tiers, speeds

    cold = [rec(i, prompt_tokens=1031, server_prefill_ms=5.0, ttft_s=0.0116) for i in range(3)]
    s = speeds(Tiers(signal="ttft", device_s=0.001), cold, 1000, 0.0)
    assert s.cold_signal == "server" and s.cold == pytest.approx(1000 / 0.005)


def contexts_served(capacity: int, sends: list[str], blocks: int = 8) -> tuple[list, list]:
    """Prompts of whole contexts and what an LRU cache (tail first) of `capacity` blocks
    served each, as the simulator's cache counts it."""
    cache = PrefixCache(1, capacity, eviction="lru", tail_first=True)
    prompts, served = [], []
    for tag in sends:
        hashes = [hash((tag, i)) for i in range(blocks)]
        since = cache.placements
        m = cache.match(hashes)
        cache.release(m.pinned + cache.insert(hashes[m.blocks:]), since)
        prompts.append(Prompt(((tag, blocks),), cap=blocks))
        served.append(m.blocks)
    return prompts, served


def test_the_fit_finds_the_order_and_the_capacity_that_serve_every_count():
    sends = ["a", "b", "c", "a", "d", "e", "a", "f", "b", "a"]
    prompts, served = contexts_served(37, sends)
    fits = fit_all(prompts, served, guess=40, context=8)
    lru = [f for f in fits if (f.policy, f.end) == ("lru", "tail")]
    assert lru and lru[0].low <= 37 <= lru[0].high


def test_a_naive_bisection_fills_contexts_again_for_every_guess():
    # 10 contexts of 100 kept: 1, 2, 4, 8 (kept), 16 (not), then 12, 10, 11: 64 contexts
    assert naive_bisection(1000, 100) == 6400
    assert naive_bisection(100, 100) == 300  # 1 kept, 2 not
