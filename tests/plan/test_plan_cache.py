"""plan: the perfect-cache model across sessions, and the LRU cache theory (`--cache-tokens`).

Input: small `.wl` texts whose sharing is known by hand. Output checked: `expected_cached` counts
any request certainly finished before (its own session's, any earlier phase's, whichever session
sent it), `expected_cached_max` what concurrent sessions could add and the plan's assumptions say
so; `lru_cached` against hand-computed LRU evictions (tail first), and against the perfect cache
when nothing is evicted; the dry-run shows all of it; the plan of a long conversation is linear.
"""

from __future__ import annotations

import json

import pytest

from workloadlang import api
from workloadlang.cli.main import main as wl_main
from workloadlang.plan.dryrun import render_plan
from workloadlang.plan.model import CacheModel, Plan
from workloadlang.plan.prefix import END_TOKENS, HEADER_TOKENS

SYSTEM = "You are a helpful assistant."  # 28 characters: 7 planned tokens
SYS_MSG = HEADER_TOKENS + 7 + END_TOKENS


def plan_of(text: str, cache: CacheModel | None = None, **params: str) -> Plan:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt="cache", cache=cache)


def by_id(plan: Plan) -> dict:
    return {r.id: r for r in plan.requests}


# ---------------------------------------------------------------- across sessions


def test_identical_literal_prompts_of_concurrent_sessions_are_a_range_not_a_promise():
    plan = plan_of(f"""workload w {{ session a repeat 3 {{
        system "{SYSTEM}"; user filler 100; reply 8 }} }}""")
    shared = SYS_MSG + HEADER_TOKENS  # the system message and the next user header
    for r in plan.requests:
        assert r.expected_cached == 0  # all three start together: none finished before
        assert r.expected_cached_max == shared
    assert plan.totals.expected_cached_max_tokens == 3 * shared
    (said,) = plan.assumptions
    assert "3 request(s) share up to 42 more tokens" in said and "a#0/reply/0" in said
    text = render_plan(plan)
    assert "exp. max" in text and "up to (possible: other sessions first)" in text and "assumes:" in text


def test_a_prefix_left_before_a_phase_barrier_is_expected_whichever_session_left_it():
    plan = plan_of(f"""workload w {{
        session a {{ phase warm {{ system "{SYSTEM}"; user filler 200; reply 8 }} }}
        session b {{ phase use {{ system "{SYSTEM}"; user "A question."; reply 8 }} }}
    }}""")
    b = by_id(plan)["b#0/use/reply/0"]
    assert b.expected_cached == SYS_MSG + HEADER_TOKENS
    assert b.prefix_source == "a#0/warm/reply/0" and b.expected_cached_max is None
    assert plan.assumptions == ()


def test_any_earlier_request_of_the_session_counts_not_only_the_last():
    plan = plan_of(f"""workload w {{ session s {{
        fresh label first {{ system "{SYSTEM}"; user filler 300; reply 4 }}
        fresh label other {{ user "Something else entirely."; reply 4 }}
        fresh label again {{ system "{SYSTEM}"; user filler 300; reply 4 }}
    }} }}""")
    again = by_id(plan)["s#0/again/0"]
    assert again.expected_cached == SYS_MSG + HEADER_TOKENS
    assert again.prefix_source == "s#0/first/0"


def test_a_conversation_names_its_last_request_as_the_source():
    plan = plan_of("""workload w { session s { user filler 100
        repeat 3 label turn { reply 8 replay; user filler 10 } reply 8 } }""")
    ids = [r.id for r in plan.requests]
    for prev, r in zip(plan.requests, plan.requests[1:]):
        assert r.prefix_source == prev.id
        assert r.expected_cached == prev.prompt_tokens + 8  # its prompt, then its reply
    assert len(ids) == 4


def test_resends_name_the_request_they_resend():
    plan = plan_of("""workload w { session s {
        spawn 3 cold label ctx { user filler 100; probe as ctx }
        for i in reverse 0..3 label back { resend ctx[$i] } } }""")
    for r in plan.requests[3:]:
        assert r.prefix_source == f"s#0/ctx/{r.index}"
        assert r.expected_cached == r.prompt_tokens - 1


# ---------------------------------------------------------------- LRU theory

CONTEXTS = """workload w { params { n: int = 3 } concurrency = 1 session s {
    phase hydrate { spawn $n cold label ctx { user filler 100; probe as ctx } }
    phase verify { for i in reverse 0..$n label verify { resend ctx[$i] } } } }"""
# one context: header 3 + filler 100 + end 1 + generation prompt 3 = 107 tokens, 6 full blocks of
# 16, and its 1 generated token completes none


def lru_of(plan: Plan) -> list[int]:
    return [r.lru_cached for r in plan.requests]


def test_an_lru_cache_of_two_contexts_loses_the_oldest_of_three():
    plan = plan_of(CONTEXTS, CacheModel(tokens=12 * 16, block=16))
    assert lru_of(plan) == [0, 0, 0, 96, 96, 0]
    # contexts share their user message's header (3 tokens): too little for a block of 16
    assert [r.expected_cached for r in plan.requests] == [0, 3, 3, 106, 106, 106]
    assert plan.totals.lru_cached_tokens == 192


def test_lru_evicts_a_prefix_from_its_end():
    """15 blocks: the third context evicts three of the first's six, its last three (a
    prefix's first blocks are its most recently used), so 3 blocks of it are still served."""
    plan = plan_of(CONTEXTS, CacheModel(tokens=15 * 16, block=16))
    assert lru_of(plan) == [0, 0, 0, 96, 96, 48]


def test_lru_without_eviction_is_the_perfect_cache_rounded_to_blocks():
    text = f"""workload w {{ session s {{ system "{SYSTEM}"
        grow until 2k by 200 label main {{ user filler 200; reply 16 replay }}
        spawn 2 cold label sub {{ system "{SYSTEM}"; user filler 300; reply 8 }}
        turn finalize {{ user filler 50; reply 8 }} }} }}"""
    exact = plan_of(text, CacheModel(tokens=10**6, block=1))
    assert lru_of(exact) == [r.expected_cached for r in exact.requests]
    blocks = plan_of(text, CacheModel(tokens=10**6, block=16))
    for r in blocks.requests:
        assert r.lru_cached == min(r.expected_cached // 16 * 16, (r.prompt_tokens - 1) // 16 * 16)


def test_lru_never_serves_more_than_the_perfect_cache_promises():
    plan = plan_of(f"""workload w {{ session a repeat 4 {{
        system "{SYSTEM}"; user filler 64; reply 8 }} }}""", CacheModel(tokens=10**6, block=1))
    assert all(r.lru_cached <= r.expected_cached for r in plan.requests)


def test_a_cache_smaller_than_a_block_serves_nothing():
    plan = plan_of(CONTEXTS, CacheModel(tokens=10, block=16))
    assert lru_of(plan) == [0] * 6


def test_the_lru_figures_do_not_change_the_plan_hash():
    assert plan_of(CONTEXTS, CacheModel(tokens=192, block=16)).plan_hash == \
        plan_of(CONTEXTS).plan_hash


def test_wl_plan_prints_both_hit_rates_and_the_json_has_them(capsys, tmp_path):
    f = tmp_path / "w.wl"
    f.write_text(CONTEXTS)
    assert wl_main(["plan", str(f), "--salt", "s", "--cache-tokens", "192",
                     "--cache-block", "16"]) == 0
    out = capsys.readouterr().out
    assert "LRU cached" in out and "LRU 192 / 16" in out and "LRU: a cache of 192 tokens" in out
    assert wl_main(["plan", str(f), "--salt", "s", "--cache-tokens", "192", "--cache-block",
                     "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["lru_cached_tokens"] == 192
    assert data["totals"]["expected_cached_tokens"] == 324
    assert [r["lru_cached"] for r in data["requests"]] == [0, 0, 0, 96, 96, 0]
    assert data["cache_model"] == {"tokens": 192, "block": 16}


@pytest.mark.parametrize("flags", [["--cache-block", "16"], ["--cache-tokens", "lots"],
                                   ["--cache-tokens", "0"]])
def test_bad_cache_flags_are_usage_errors(capsys, flags):
    try:
        code = wl_main(["plan", "abort-sim", *flags])
    except SystemExit as e:  # argparse's own usage error
        code = e.code
    assert code == 2


# ---------------------------------------------------------------- scale


def test_a_long_conversation_plans_in_linear_size():
    """2,000 turns: each request names its last message, not all 4,000 of them, so the plan's
    JSON grows linearly with the turns (it held every request's message list before)."""
    text = """workload w { params { n: int = 1 } session s {
        repeat $n { user filler 10; reply 4 replay } } }"""
    small, large = plan_of(text, n="500"), plan_of(text, n="2000")
    ratio = len(large.model_dump_json()) / len(small.model_dump_json())
    assert 3.5 < ratio < 4.5
    last = large.requests[-1]
    assert len(large.message_ids(last)) == 2 * 2000 - 1
    assert last.expected_cached == large.requests[-2].prompt_tokens + 4


def test_a_planned_request_copies_with_an_update():
    """Requests are built unvalidated with one shared set of field names: a copy with an update
    (as `wl run --no-isolation` makes) still works and leaves the others alone."""
    plan = plan_of(CONTEXTS)
    a, b = plan.requests[0], plan.requests[1]
    c = a.model_copy(update={"isolated": True})
    assert c.isolated and not a.isolated and not b.isolated
    assert "isolated" in c.model_fields_set and c.model_dump()["id"] == a.id


def test_a_prompts_messages_are_its_whole_chain_however_they_are_asked_for():
    """`message_ids` makes a chain from an earlier one when it can: in any order of asking,
    with forks, resends and more prompts than it keeps, it is the `after` chain."""
    import random

    from workloadlang.plan import model

    plan = plan_of("""workload w { session s repeat 2 { user filler 10
        repeat 150 label turn { reply 4 replay; user filler 5 }
        spawn 3 fork label side { user "Aside."; reply 2 }
        probe as last; resend last } }""")

    def walked(r):
        out, i = [], r.last_message
        while i is not None:
            out.append(i)
            i = plan.messages[i].after
        return tuple(reversed(out))

    reqs = list(plan.requests)
    assert len(reqs) > model.CHAINS_KEPT
    random.Random(7).shuffle(reqs)
    for r in [*plan.requests, *reqs, *reversed(plan.requests)]:
        assert plan.message_ids(r) == walked(r), r.id
