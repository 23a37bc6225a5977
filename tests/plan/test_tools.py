"""Tool calls and reasoning replay: `assistant call NAME { ... }`, `reply N call ...`, `tool`
messages and `reply N replay content`, from the source to the bytes sent, the simulator's
template and the cache it keeps."""

from __future__ import annotations

import json
import re

import pytest

from runhelp import records, wl_run_text
from workloadlang import api
from workloadlang.check import check
from workloadlang.diagnostics import WorkloadError
from workloadlang.parse import parse
from workloadlang.plan.model import Plan
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.sim.tokenizer import render_tokens

AGENT = """
workload tools {
  session main {
    system "You are a coding agent."
    user filler 200
    reply 32 call read_file { path = "src/app.py", lines = filler 12 } label ask
    tool filler 300
    assistant "Two more.", call grep { pattern = "TODO" }, call list_dir
    tool "3 matches"
    tool filler 40
    reply 16 label after
    user "Summarise."
    reply 8 label again
  }
}
"""


def plan_of(text: str, **params: str) -> Plan:
    wl = parse(text, "t.wl")
    assert [d for d in check(wl) if d.severity == "error"] == []
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(wl, source, params, salt="tools")


class Answer:
    def __init__(self, content: str, reasoning: str = "", completion_tokens: int | None = None):
        self.content, self.reasoning, self.completion_tokens = content, reasoning, completion_tokens


def last_messages(plan: Plan, label: str, replies: dict) -> list[dict]:
    req = next(r for r in plan.requests if r.label == label)
    return Realiser(plan, RatioSizer(1.0)).messages(req, replies)


def test_calls_and_results_are_sent_in_the_openai_chat_format():
    plan = plan_of(AGENT)
    ask = next(r for r in plan.requests if r.label == "ask")
    msgs = last_messages(plan, "after", {ask.id: Answer("I will read it.")})
    roles = [m["role"] for m in msgs]
    assert len(plan.requests) == 3
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    first, second = msgs[2], msgs[4]
    assert first["content"] == "I will read it."
    [read] = first["tool_calls"]
    assert read["type"] == "function" and read["function"]["name"] == "read_file"
    args = json.loads(read["function"]["arguments"])
    assert args["path"] == "src/app.py" and len(args["lines"].split()) == 12
    assert second["content"] == "Two more."
    assert [c["function"]["name"] for c in second["tool_calls"]] == ["grep", "list_dir"]
    assert json.loads(second["tool_calls"][1]["function"]["arguments"]) == {}
    # each tool message answers the oldest unanswered call of the last assistant turn
    ids = [read["id"]] + [c["id"] for c in second["tool_calls"]]
    assert [msgs[3]["tool_call_id"], msgs[5]["tool_call_id"], msgs[6]["tool_call_id"]] == ids
    assert len(set(ids)) == 3 and all(re.fullmatch(r"[0-9a-f]{9}", i) for i in ids)
    assert msgs[5]["content"] == "3 matches"


def test_the_dry_run_counts_calls_results_and_replies_without_reasoning():
    from workloadlang.plan.dryrun import render_plan

    text = render_plan(plan_of(AGENT.replace("reply 16 label after",
                                             "reply 16 replay content label after")))
    assert "tool calls                   3 (28 tokens), 3 results (343 tokens)" in text
    assert "replayed without reasoning   1 of 3 replies (`replay content`)" in text
    assert "tool calls" not in render_plan(plan_of(THINKING))


def test_a_call_is_the_same_bytes_in_every_resend_and_plan():
    plan, again = plan_of(AGENT), plan_of(AGENT)
    ask = next(r for r in plan.requests if r.label == "ask")
    replies = {ask.id: Answer("ok")}
    assert last_messages(plan, "after", replies) == last_messages(again, "after", replies)
    # the plan's JSON keeps the calls (a plan read back realises the same messages)
    back = Plan.model_validate_json(plan.model_dump_json())
    assert last_messages(back, "after", replies) == last_messages(plan, "after", replies)
    assert back.plan_hash == plan.plan_hash


def test_the_simulator_counts_a_call_as_the_plan_does():
    """The tokens a tool call adds in the simulator's template are the plan's: its markup, each
    key, each filler's tokens (sized one word a token, as the simulator's tokenizer sizes
    them). (Literal text is planned at 4 characters a token, everywhere.)"""
    plan = plan_of("""workload w { session s {
        user "go"; assistant call edit { path = filler 5, text = filler 120 }, call list_dir
        tool filler 30; tool filler 20; reply 4 } }""")
    msgs = last_messages(plan, "reply", {})
    without = [{k: v for k, v in m.items() if k != "tool_calls"} for m in msgs]
    added = len(render_tokens(msgs)) - len(render_tokens(without))
    calls = [s for m in plan.messages for s in m.segs if s.kind == "call"]
    assert added == sum(s.tokens for s in calls) == (3 + 1 + 5 + 1 + 120) + 3


@pytest.mark.parametrize("text, code", [
    ('user "x", call read_file', "WL230"),
    ('user "x"; reply 8 drop call grep', "WL230"),
    ('assistant call f { a = "1", a = "2" }', "WL202"),
    ('assistant call f { a = filler -3 }', "WL305"),
])
def test_misplaced_calls_are_reported_by_check(text, code):
    wl = parse(f"workload w {{ session s {{ {text} }} }}", "w.wl")
    assert code in [d.code for d in check(wl)]


@pytest.mark.parametrize("body", [
    'user "x"; tool "result"; reply 4',  # no call before it
    'assistant call f; tool "a"; tool "b"; reply 4',  # one call, two results
    'assistant call f; user "y"; assistant "no call"; tool "late"; reply 4',
])
def test_a_tool_message_that_answers_no_call_is_refused_by_check_and_the_planner(body):
    text = f"workload w {{ session s {{ {body} }} }}"
    assert [d.code for d in check(parse(text, "t.wl"))] == ["WL430"]
    with pytest.raises(WorkloadError) as exc:
        api.make_plan(parse(text, "t.wl"), api.Source(name="t.wl", text=text), {}, salt="s")
    assert [d.code for d in exc.value.diagnostics] == ["WL430"]


def test_a_fork_inherits_the_calls_left_to_answer():
    plan = plan_of("""workload w { session s {
        user "go"; assistant call f, call g
        spawn 2 fork { tool "a"; tool "b"; reply 4 } } }""")
    assert len(plan.requests) == 2


def test_tool_calls_and_results_cache_like_any_other_content_on_the_simulator(tmp_path):
    code, res = wl_run_text(tmp_path, AGENT, "--sim", "--salt", "tools")
    assert code == 0
    [after], [again] = records(res, "after"), records(res, "again")
    # what `after` sent (calls and results) and its answer came back from the cache, to a block
    assert again["cached_tokens"] >= after["prompt_tokens"] + after["completion_tokens"] - 16
    assert again["hit"] is True and again["reuse"] >= 0.95
    # the first turn, without its calls: only what the simulator generated was cached
    assert abs(after["cached_tokens"] - after["expected_cached"]) <= 16


THINKING = """
workload reasoning {
  params { mode: string = "replay" one of "replay", "content" }
  options { reasoning_effort = "high" }
  session main {
    user filler 400
    if $mode == "content" { reply 64 replay content label first } else { reply 64 label first }
    user "Go on."
    reply 8 label next
  }
}
"""


@pytest.mark.parametrize("mode", ["replay", "content"])
def test_replay_content_leaves_the_reasoning_out_and_the_plan_expects_it(tmp_path, mode):
    """With reasoning replayed, the next turn reuses the prompt and the whole answer; with its
    content only (as most chat templates send it) the answer's tokens differ from what was
    generated, so only the prompt is reused. The plan expects each, and the simulator's cache
    agrees (a hit either way)."""
    plan = plan_of(THINKING, mode=mode)
    first, nxt = plan.requests
    gap = nxt.expected_cached - first.prompt_tokens
    assert gap == (64 if mode == "replay" else 0)  # the generated answer, or none of it
    code, res = wl_run_text(tmp_path, THINKING, "--sim", "--salt", "r", "--mode", mode,
                            "--sim-think-tokens", "40")
    assert code == 0
    [f], [n] = records(res, "first"), records(res, "next")
    assert f["completion_tokens"] == 64
    cached_beyond_prompt = n["cached_tokens"] - f["prompt_tokens"]
    if mode == "replay":
        assert cached_beyond_prompt >= 64 - 16  # the answer, to a block
    else:
        assert -16 < cached_beyond_prompt <= 0  # the prompt, to a block; not the answer
    assert n["hit"] is True and n["reuse"] >= 0.95


def test_replay_content_without_reasoning_expects_the_whole_answer(tmp_path):
    """An engine that generated no reasoning: the content is all it generated, so the answer
    replayed without reasoning is what it cached, and the run expects it (a hit whose
    expectation holds the answer)."""
    text = THINKING.replace('"high"', '"none"')
    code, res = wl_run_text(tmp_path, text, "--sim", "--salt", "r", "--mode", "content")
    assert code == 0
    [f], [n] = records(res, "first"), records(res, "next")
    assert n["expected_cached"] >= f["prompt_tokens"] + f["completion_tokens"] - 1
    assert n["cached_tokens"] >= f["prompt_tokens"] + 64 - 16
