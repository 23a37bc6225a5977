"""plan: what each construct plans, on small workloads (and on the bundled agent-sim).

Input: `.wl` text, params, salt. Output checked: the planned requests (ids, messages, sizes,
expected cached tokens, stop groups, waits, options) and the plan-time diagnostics WL404-WL407.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from workloadlang import api
from workloadlang.diagnostics import Diagnostic, WorkloadError
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.prefix import END_TOKENS, GEN_PROMPT_TOKENS, HEADER_TOKENS

SALT = "semantics"


def plan_of(text: str, params: Mapping[str, Any] | None = None, salt: str = SALT,
            env: Mapping[str, Any] | None = None) -> Plan:
    source = api.Source(name="t.wl", text=text)
    wl = api.parse_checked(source)
    overrides = {k: str(v) for k, v in (params or {}).items()}
    return api.make_plan(wl, source, overrides, salt=salt, env=env)


def plan_errors(text: str, params: Mapping[str, Any] | None = None,
                env: Mapping[str, Any] | None = None) -> list[Diagnostic]:
    with pytest.raises(WorkloadError) as exc:
        plan_of(text, params, env=env)
    return exc.value.diagnostics


def labelled(plan: Plan, label: str) -> list[PRequest]:
    return [r for r in plan.requests if r.label == label]


def filler_messages(plan: Plan, req: PRequest) -> set[int]:
    return {i for i in plan.message_ids(req) if any(s.kind == "filler" for s in plan.messages[i].segs)}


# ---------------------------------------------------------------- spawn, fork, growth

AGENT = """workload agent {
  session main {
    system "You are a helpful assistant."
    grow until 3k by 1k label main { user filler 1k; reply 16 replay }
    spawn 2 cold label sub { system "You are a helpful assistant."; user filler 2k; reply 16 }
    turn finalize { user filler 500; reply 16 }
  }
}"""


def test_spawn_cold_leaves_the_parent_untouched():
    plan = plan_of(AGENT)
    main, subs, (fin,) = labelled(plan, "main"), labelled(plan, "sub"), labelled(plan, "finalize")
    last = main[-1]
    assert len(main) == 3 and len(subs) == 2
    # The finalize continues the main conversation exactly: its prompt starts with the last main
    # step's prompt, then that step's reply; nothing of the sub-agents is in it.
    assert plan.message_ids(fin)[:len(plan.message_ids(last))] == plan.message_ids(last)
    assert not set(plan.message_ids(fin)) & {i for s in subs for i in plan.message_ids(s)}
    assert fin.expected_cached == last.prompt_tokens + last.max_tokens
    assert fin.prefix_source == last.id
    assert fin.deps == (subs[-1].id, last.id)


def test_cold_sub_agents_share_only_the_literal_system_prompt():
    plan = plan_of(AGENT)
    system = HEADER_TOKENS + len("You are a helpful assistant.") // 4 + END_TOKENS
    for sub in labelled(plan, "sub"):
        # The system message, and the header of the user message that follows it.
        assert sub.expected_cached == system + HEADER_TOKENS == 14
        assert not filler_messages(plan, sub) & {i for r in labelled(plan, "main")
                                                 for i in plan.message_ids(r)}
    a, b = labelled(plan, "sub")
    assert not filler_messages(plan, a) & filler_messages(plan, b)


def test_bundled_agent_sim_finalize_reuses_the_whole_main_context():
    source = api.load("agent-sim")
    plan = api.make_plan(api.parse_checked(source), source, {}, salt=SALT)
    for sid in ("main#0", "main#1", "main#2"):
        reqs = [r for r in plan.requests if r.session == sid]
        main = [r for r in reqs if r.label == "main"]
        (fin,) = [r for r in reqs if r.label == "finalize"]
        assert len(main) == 30 and len([r for r in reqs if r.label == "sub"]) == 2
        assert fin.expected_cached == main[-1].prompt_tokens + 64 == 152_170


def test_fork_shares_the_parent_prefix_and_leaves_the_parent_untouched():
    plan = plan_of("""workload w { session main {
        user filler 1k; reply 16 label first
        spawn 2 fork label side { user "A side question."; reply 8 }
        turn back { user "Back to work."; reply 8 }
    } }""")
    (first,), (back,) = labelled(plan, "first"), labelled(plan, "back")
    sides = labelled(plan, "side")
    parent = plan.message_ids(first) + (plan.message_ids(first)[-1] + 1,)  # prompt, reply
    assert plan.messages[parent[-1]].segs[0].key == first.id
    for side in sides:
        assert plan.message_ids(side)[:len(parent)] == parent
    assert sides[0].expected_cached == first.prompt_tokens + first.max_tokens
    # The second fork asks the same literal question: its prompt is the first fork's, byte for byte.
    assert sides[1].prompt_tokens == sides[0].prompt_tokens
    assert sides[1].expected_cached == sides[0].prompt_tokens - 1
    assert set(plan.message_ids(sides[0])[len(parent):]).isdisjoint(plan.message_ids(sides[1]))
    assert plan.message_ids(back)[:len(parent)] == parent
    forked = plan.message_ids(sides[0])[len(parent):] + plan.message_ids(sides[1])[len(parent):]
    assert not set(plan.message_ids(back)) & set(forked)
    # From the last fork's prompt: the parent's prompt and reply, then the reply's end marker and
    # the next user header (the fork's question differs from there on).
    assert back.expected_cached == first.prompt_tokens + first.max_tokens + END_TOKENS + \
        HEADER_TOKENS
    assert back.prefix_source == sides[1].id


def test_growth_replays_each_reply_into_the_next_step():
    plan = plan_of("""workload w { session main {
        grow until 4k by 1k as k label main { user filler 1k; reply 32 replay } } }""")
    steps = labelled(plan, "main")
    assert [r.index for r in steps] == [0, 1, 2, 3]
    for prev, cur in zip(steps, steps[1:]):
        assert cur.expected_cached == prev.prompt_tokens + 32
        reply_header_and_end = HEADER_TOKENS + END_TOKENS
        added = reply_header_and_end + 32 + HEADER_TOKENS + 1000 + END_TOKENS
        assert cur.prompt_tokens == prev.prompt_tokens + added
        assert cur.new_tokens == 1000 and cur.deps == (prev.id,)


@pytest.mark.parametrize("mode, cached_past_prompt", [("replay", 16), ("synthetic", 0),
                                                      ("drop", -GEN_PROMPT_TOKENS)])
def test_reply_modes_decide_what_the_next_request_can_reuse(mode: str, cached_past_prompt: int):
    plan = plan_of(f"""workload w {{ session main {{
        user filler 1k; reply 16 {mode} label a; user "More."; reply 4 label b }} }}""")
    (a,), (b,) = labelled(plan, "a"), labelled(plan, "b")
    assert a.reply_kept == mode
    # A synthetic stand-in is not what the engine generated: only the assistant header is cached.
    assert b.expected_cached == a.prompt_tokens + cached_past_prompt
    kept = [s for i in plan.message_ids(b) for s in plan.messages[i].segs if s.kind == "reply"]
    assert [(s.key, s.tokens, s.synthetic) for s in kept] == (
        [] if mode == "drop" else [(a.id, 16, mode == "synthetic")])


def test_fresh_and_sessions_start_empty():
    plan = plan_of("""workload w {
        session a repeat 2 { user filler 1k; reply 8; fresh label f { user filler 1k; reply 8 } }
    }""")
    for r in plan.requests:
        # Nothing but the header of the first message (`<|im_start|>user\n`) is shared.
        assert r.expected_cached in (0, HEADER_TOKENS), r.id
    by_session = {}
    for r in plan.requests:
        by_session.setdefault(r.session, set()).update(plan.message_ids(r))
    assert by_session["a#0"].isdisjoint(by_session["a#1"])


# ---------------------------------------------------------------- loops, resend, wait, if, phases

RESENDS = """workload w { session main {
    phase hydrate { spawn 3 cold label ctx { user filler 1k; probe as ctx } }
    phase verify { for i in reverse 0..3 until miss label verify { resend ctx[$i] max_tokens 2 } }
} }"""


def test_reverse_until_loop_sets_stop_groups_and_iterations():
    plan = plan_of(RESENDS)
    ctx, verify = labelled(plan, "ctx"), labelled(plan, "verify")
    assert [r.index for r in verify] == [2, 1, 0]
    assert [r.stop_iter for r in verify] == [0, 1, 2]
    assert {r.stop_on for r in verify} == {"miss"}
    (group,) = {r.stop_group for r in verify}
    assert group and group.startswith("main#0:")
    assert {(r.stop_group, r.stop_on, r.stop_iter) for r in ctx} == {(None, None, None)}


def test_until_applies_to_every_request_of_an_iteration_and_only_its_own_loop():
    plan = plan_of("""workload w { session main {
        for i in 0..2 until hit label outer {
            user filler 100; probe
            for j in 0..2 until error label inner { user filler 100; probe }
        }
        repeat 2 label after { user filler 100; probe }
    } }""")
    outer, inner = labelled(plan, "outer"), labelled(plan, "inner")
    assert [(r.stop_on, r.stop_iter) for r in outer] == [("hit", 0), ("hit", 1)]
    assert [(r.stop_on, r.stop_iter) for r in inner] == [("error", 0), ("error", 1)] * 2
    assert len({r.stop_group for r in inner}) == 2  # one loop instance per outer iteration
    assert {r.stop_group for r in outer}.isdisjoint({r.stop_group for r in inner})
    assert {r.stop_group for r in labelled(plan, "after")} == {None}


def test_resend_sends_the_same_messages_again():
    plan = plan_of(RESENDS)
    ctx = {r.index: r for r in labelled(plan, "ctx")}
    for r in labelled(plan, "verify"):
        src = ctx[r.index]
        assert r.kind == "resend" and r.max_tokens == 2
        assert plan.message_ids(r) == plan.message_ids(src) and r.prompt_tokens == src.prompt_tokens
        assert r.new_tokens == 0
        assert r.expected_cached == src.prompt_tokens - 1  # all of it, but one to compute
        assert r.prefix_source == src.id and src.id in r.deps


def test_resend_of_a_missing_index_is_wl404():
    (d,) = plan_errors("""workload w { session main {
        spawn 2 cold { user filler 100; probe as ctx }
        resend ctx[5] } }""")
    assert d.code == "WL404" and "ctx[5]" in d.message and d.span.line == 3


def test_wait_sets_wait_before_of_the_next_request_in_its_session():
    plan = plan_of("""workload w {
        params { settle: duration = 500ms }
        session a { user "x"; reply 4; wait $settle; wait 1s + 250ms; user "y"; reply 4; wait 9s }
        session b { user "z"; reply 4 }
    }""")
    assert [(r.session, r.wait_before) for r in plan.requests] == [
        ("a#0", 0.0), ("a#0", 1.75), ("b#0", 0.0)]


@pytest.mark.parametrize("mode, tokens", [("a", 100), ("b", 200)])
def test_if_is_decided_at_plan_time(mode: str, tokens: int):
    plan = plan_of("""workload w {
        params { mode: string = "a" one of "a", "b" }
        session main { if $mode == "a" { user filler 100 } else { user filler 200 }; reply 4 }
    }""", {"mode": mode})
    (r,) = plan.requests
    (msg,) = plan.prompt_messages(r)
    (seg,) = msg.segs
    assert (seg.kind, seg.tokens, r.new_tokens) == ("filler", tokens, tokens)
    assert ("/then/" if mode == "a" else "/else/") in seg.key


def test_phases_are_recorded_in_order_of_first_appearance():
    plan = plan_of("""workload w {
        session a { phase load { user filler 100; probe } }
        session b repeat 2 { phase warm { user "w"; probe }; phase load { probe } }
    }""")
    assert plan.phases == ("load", "warm")
    assert [(r.session, r.phase) for r in plan.requests] == [
        ("a#0", "load"), ("b#0", "warm"), ("b#0", "load"), ("b#1", "warm"), ("b#1", "load")]
    assert [r.id for r in plan.requests][:2] == ["a#0/load/probe/0", "b#0/warm/probe/0"]


def test_request_ids_are_unique_and_stable():
    plan = plan_of("""workload w { session main repeat 2 {
        user "a"; reply 4; reply 4; repeat 2 label r { probe; probe } } }""")
    ids = [r.id for r in plan.requests]
    assert len(set(ids)) == len(ids)
    assert ids[:6] == ["main#0/reply/0", "main#0/reply/0.1", "main#0/r/0", "main#0/r/0.1",
                       "main#0/r/1", "main#0/r/1.1"]
    assert [r.seq for r in plan.requests] == list(range(len(ids)))
    assert ids == [r.id for r in plan_of("""workload w { session main repeat 2 {
        user "a"; reply 4; reply 4; repeat 2 label r { probe; probe } } }""", salt="x").requests]


# ---------------------------------------------------------------- options, abort

OPTIONS = """workload w {
  params { thinking: bool = false }
  options {
    reasoning_effort = if($thinking, null, "none"), seed = 7
    chat_template_kwargs = { enable_thinking = $thinking, extra = null }
  }
  session main {
    user "hi"
    reply 4 options { seed = 8, temperature = 0, top_p = null }
    probe
  }
}"""


def test_options_merge_request_over_workload_and_drop_nulls():
    reply, probe = plan_of(OPTIONS).requests
    assert reply.options == {"reasoning_effort": "none", "seed": 8,
                             "chat_template_kwargs": {"enable_thinking": False},
                             "temperature": 0}
    assert probe.options == {"reasoning_effort": "none", "seed": 7,
                             "chat_template_kwargs": {"enable_thinking": False}}


def test_a_null_workload_option_is_left_out():
    reply, probe = plan_of(OPTIONS, {"thinking": "true"}).requests
    assert "reasoning_effort" not in reply.options and "reasoning_effort" not in probe.options
    assert reply.options["chat_template_kwargs"] == {"enable_thinking": True}


def test_abort_appends_a_partial_reply_segment():
    plan = plan_of("""workload w { session main {
        user filler 1k; reply 2k abort after 100 label prime
        user "Step back."; probe label reprompt } }""")
    (prime,), (re,) = labelled(plan, "prime"), labelled(plan, "reprompt")
    assert (prime.abort_after, prime.max_tokens, prime.reply_kept) == (100, 2000, "partial")
    partial = plan.messages[plan.message_ids(re)[len(plan.message_ids(prime))]]
    assert partial.role == "assistant"
    assert [(s.kind, s.key, s.tokens) for s in partial.segs] == [("partial", prime.id, 100)]
    assert re.expected_cached == prime.prompt_tokens + 100
    assert plan.totals.working_set_tokens == re.prompt_tokens - re.expected_cached + \
        prime.prompt_tokens + 100 + 1  # each request's cold tokens + what it generates


def test_abort_with_drop_appends_nothing():
    plan = plan_of("""workload w { session main {
        user filler 1k; reply 2k abort after 100 drop label prime; probe label again } }""")
    (prime,), (again,) = labelled(plan, "prime"), labelled(plan, "again")
    assert (prime.abort_after, prime.reply_kept) == (100, "drop")
    assert plan.message_ids(again) == plan.message_ids(prime)
    assert again.expected_cached == prime.prompt_tokens - 1


def test_expected_cached_never_reaches_the_whole_prompt():
    plan = plan_of("""workload w { session main { user filler 1k; probe; probe; probe } }""")
    first, *rest = plan.requests
    assert first.expected_cached == 0
    assert [r.expected_cached for r in rest] == [first.prompt_tokens - 1] * 2


# ---------------------------------------------------------------- plan-time diagnostics


def test_gate_selector_matching_no_planned_request_is_wl405():
    diags = plan_errors("""workload w {
  session main repeat 2 { turn a { user "hi"; reply 4 } }
  gates {
    h: overall median(ttft{a, warm}) < 1s
    e: each session count(ok{a, probe}) >= 1
    fine: overall count(ok{a, cold}) >= 1
  }
}""")
    assert [(d.code, d.span.line) for d in diags] == [("WL405", 4), ("WL405", 5)]
    assert "gate `h`" in diags[0].message
    assert "gate `e`" in diags[1].message and "in any session" in diags[1].message


def test_context_larger_than_the_limit_is_wl406_once_per_statement():
    text = """workload w { session main {
    grow until 10k by 1k { user filler 1k; reply 64 }
    turn last { user filler 1k; reply 64 } } }"""
    diags = plan_errors(text, env={"max_context": 5000})
    assert [(d.code, d.span.line) for d in diags] == [("WL406", 2), ("WL406", 3)]
    assert "main#0/reply/4" in diags[0].message and "5,000" in diags[0].message
    assert len(plan_of(text, env={"max_context": 20_000}).requests) == 11


def test_wl406_names_the_flag_of_the_generation_budget():
    text = """workload w { params { budget: int = 4000 }
    session s { user filler 1k; reply $budget; user "x"; reply 64 } }"""
    diags = plan_errors(text, env={"max_context": 3000})
    assert [d.hint for d in diags] == [  # the second reply's prompt holds the first's reply
        "lower the generation budget (--budget) or the prompt, or raise --max-context if the "
        "engine allows", "lower the sizes, or raise --max-context if the engine allows"]


def test_a_workload_setting_max_context_limits_too():
    diags = plan_errors("workload w { max_context = 100\n session s { user filler 200; reply 4 } }")
    assert [d.code for d in diags] == ["WL406"]


def test_max_context_unknown_is_wl407():
    text = """workload w {
  params { limit: tokens = $max_context in 1.. }
  session main { grow until $limit / 2 by 1k { user filler 1k; reply 8 } }
}"""
    (d,) = plan_errors(text)
    assert d.code == "WL407" and d.span.line == 2 and "--max-context" in d.hint
    assert len(plan_of(text, env={"max_context": 8192}).requests) == 5  # ceil(4096 / 1000)
    assert len(plan_of(text, {"limit": 4096}).requests) == 3


def test_bundled_perf_sim_needs_the_context_limit():
    source = api.load("perf-sim")
    wl = api.parse_checked(source)
    with pytest.raises(WorkloadError) as exc:
        api.make_plan(wl, source, {}, salt=SALT)
    assert [d.code for d in exc.value.diagnostics] == ["WL407"]
    plan = api.make_plan(wl, source, {}, salt=SALT, env={"max_context": 65536})
    assert plan.max_context == 65536
    assert max(r.prompt_tokens + r.max_tokens for r in plan.requests) <= 65536


# ---------------------------------------------------------------- isolated


ISOLATED = """
workload iso {
  session main repeat 2 {
    user filler 1k
    reply 8 as first
    reply 8 isolated label one
    spawn 2 fork isolated label twin { user filler 100; reply 4 }
    turn fin isolated { user filler 200; reply 4; probe label inner }
    probe isolated label p
    repeat 2 isolated label r { user "x"; reply 2 }
    for i in 0..2 isolated label f { user "y"; reply 2 }
    fresh isolated label fr { user "z"; probe }
    grow until 2k by 1k isolated label g { user filler 1k; reply 2 }
    resend first isolated
    resend first label plain
    reply 4 label last
  }
  gates { alone: overall count(ok{isolated}) >= 1 }
}
"""


def test_isolated_marks_requests_and_every_request_of_a_block():
    plan = plan_of(ISOLATED)
    by_label: dict[str, set[bool]] = {}
    for r in plan.requests:
        by_label.setdefault(r.label, set()).add(r.isolated)
    assert by_label.pop("reply") == {False}  # `reply 8 as first`
    assert by_label.pop("plain") == {False} and by_label.pop("last") == {False}
    assert all(v == {True} for v in by_label.values()), by_label
    assert {"one", "twin", "fin", "inner", "p", "r", "f", "fr", "g", "resend"} <= set(by_label)


def test_isolation_changes_the_plan_hash_and_its_absence_does_not():
    marked = plan_of(ISOLATED)
    unmarked = plan_of(ISOLATED.replace(" isolated", "").replace("{isolated}", "{ok}"))
    assert marked.plan_hash != unmarked.plan_hash
    assert marked.requests[0].model_dump(exclude={"isolated"}) == \
        unmarked.requests[0].model_dump(exclude={"isolated"})


def test_the_isolated_flag_selects_what_the_plan_marks():
    plan = plan_of(ISOLATED)
    reads = plan.gates[0].reads["overall"]
    assert reads == sum(r.isolated for r in plan.requests)


def test_the_dry_run_shows_isolation_only_when_a_plan_has_it():
    from workloadlang.plan.dryrun import render_plan
    assert "isolated" in render_plan(plan_of(ISOLATED)).splitlines()[4]
    assert "isolated" not in render_plan(plan_of(ISOLATED.replace(" isolated", "")
                                                 .replace("{isolated}", "{ok}")))
