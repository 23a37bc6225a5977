"""The probe's hypothesis caches agree with the simulator's cache, block for block: for random
request sequences over a few units, every eviction order, either end first, with and without a
host tier, the blocks the model serves each request are the simulator's. The simulator is the
probe's ground truth; this holds the model the probe fits to it (and to any engine of the same
family) to the same semantics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workloadlang.probe.hypotheses import Hypothesis, Prompt, replay
from workloadlang.sim.cache import PrefixCache

# prompts: a shared head unit, contexts of their own, contexts that extend another one
SHAPES = {
    "a": (("head", 2), ("a", 5)),
    "b": (("head", 2), ("b", 3)),
    "c": (("c", 6),),
    "d": (("c", 6), ("d", 2)),
    "e": (("e", 9),),
    "f": (("head", 2), ("a", 5), ("f", 4)),
}


def hashes(units) -> list:
    return [hash((key, i)) for key, n in units for i in range(n)]


def sim_serve(cache: PrefixCache, prompt: Prompt) -> int:
    """One request as the simulator's engine makes it: match, insert the rest, insert the
    answer's blocks, release. Output: the blocks served."""
    hs = hashes(prompt.units)
    since = cache.placements
    m = cache.match(hs)
    pinned = m.pinned + cache.insert(hs[len(m.pinned):])
    answer = [hash(key) for key in prompt.answer]
    pinned += cache.insert(answer)
    cache.release(pinned, since)
    return min(m.blocks, prompt.cap)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(SHAPES)), st.integers(0, 2)), min_size=1,
                max_size=30),
       st.sampled_from(["lru", "fifo", "lfu"]), st.sampled_from(["tail", "head"]),
       st.integers(8, 30), st.integers(0, 12))
def test_the_model_serves_what_the_simulator_serves(seq, policy, end, device, host):
    sim = PrefixCache(1, device, host, eviction=policy, tail_first=end == "tail")
    prompts = [Prompt(SHAPES[name], cap=sum(n for _, n in SHAPES[name]),
                      answer=tuple(f"{name}#answer{i}" for i in range(dead)))
               for name, dead in seq]
    expected = [sim_serve(sim, p) for p in prompts]
    got, _ = replay(Hypothesis(policy, end, device, host), prompts)
    assert got == expected


# contexts of tens of blocks, answers of up to 16 one-block keys: block-by-block evictions and
# restores (what a block size of 1 gives a probe's contexts)
LARGE = {"a": (("head", 20), ("a", 60)), "b": (("head", 20), ("b", 45)), "c": (("c", 70),),
         "d": (("c", 70), ("d", 25)), "e": (("e", 90),),
         "f": (("head", 20), ("a", 60), ("f", 30))}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(LARGE)), st.integers(0, 16)), min_size=1,
                max_size=40),
       st.sampled_from(["lru", "fifo", "lfu"]), st.sampled_from(["tail", "head"]),
       st.integers(60, 300), st.integers(0, 120))
def test_the_model_serves_what_the_simulator_serves_block_by_block(seq, policy, end, device,
                                                                   host):
    sim = PrefixCache(1, device, host, eviction=policy, tail_first=end == "tail")
    prompts = [Prompt(LARGE[name], cap=sum(n for _, n in LARGE[name]),
                      answer=tuple(f"{name}#{i}#answer{j}" for j in range(dead)))
               for i, (name, dead) in enumerate(seq)]
    expected = [sim_serve(sim, p) for p in prompts]
    got, _ = replay(Hypothesis(policy, end, device, host), prompts)
    assert got == expected


def test_a_context_evicted_and_restored_block_by_block_is_one_segment_again():
    """One-block answers push a context to the host a block at a time; reading it again
    restores it whole. The model serves what the simulator does, and holds the context as one
    segment (not one per block, which every later lookup in it would scan)."""
    context = Prompt((("ctx", 1000),), cap=999)
    fillers = [Prompt(((f"x{i}", 1),), cap=0, answer=tuple(f"x{i}#{j}" for j in range(16)))
               for i in range(20)]
    prompts = [context, *fillers, context]
    sim = PrefixCache(1, 1100, 1000, eviction="lru", tail_first=False)
    expected = [sim_serve(sim, p) for p in prompts]
    got, cache = replay(Hypothesis("lru", "head", 1100, 1000), prompts)
    assert got == expected and got[-1] == 999
    assert cache.where("ctx", 1000) == (1000, 0)
    assert len(cache.segs["ctx"]) == 1


def test_an_answer_is_placed_in_one_step_and_evicts_a_run_of_blocks():
    """Sixteen one-block answers on a full device evict for all of them at once: the context
    goes to the host a run of blocks per answer (what the simulator keeps, block by block,
    the same), not a segment per block that each restore and later lookup would take alone
    (each filler's prompt, a block of its own, evicts one more)."""
    context = Prompt((("ctx", 1000),), cap=999)
    fillers = [Prompt(((f"x{i}", 1),), cap=0, answer=tuple(f"x{i}#{j}" for j in range(16)))
               for i in range(20)]
    sim = PrefixCache(1, 1100, 1000, eviction="lru", tail_first=False)
    expected = [sim_serve(sim, p) for p in [context, *fillers]]
    got, cache = replay(Hypothesis("lru", "head", 1100, 1000), [context, *fillers])
    assert got == expected
    on_host = [s for s in cache.segs["ctx"] if s.host]
    assert sum(s.size for s in on_host) == cache.where("ctx", 1000)[1] > 16 * 5
    assert len(on_host) <= 2 * len(fillers)
