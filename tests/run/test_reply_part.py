"""A sub-agent's actual reply sent back as its parent's tool result (`tool reply NAME[i]`).

Input: a lead agent that calls two tools, two sub-agents in parallel whose answers the engine
makes distinct (each names its request), then the lead's tool messages carrying those answers.
Output checked: the plan (the segments, the wait on the sub-agents, the planned sizes), the
bytes the engine received (each tool message the named sub-agent's answer, its content only,
with the call's id), and the diagnostics for a name that is no request, a probe, a named text.
"""

from __future__ import annotations

import json

import httpx
import pytest

from runexec import execute, plan_of
from workloadlang import api
from workloadlang.diagnostics import WorkloadError

LEAD = """workload lead {
  session lead {
    system "You are the lead agent."
    user "Find the bug."
    reply 16 call task { prompt = "part 0" } call task { prompt = "part 1" }
    spawn 2 cold parallel as i label sub {
      user "You are sub-agent {$i}: look at part {$i}."
      reply 24 as finding
    }
    tool reply finding[0]
    tool reply finding[1], "\\n(checked)"
    reply 16 label final
  }
}
"""


def answering(seen: dict[str, dict]):
    """An engine whose answer names the request it answers (`X-WL-Request`), with reasoning
    that a tool result must leave out."""
    def chat(request: httpx.Request) -> httpx.Response:
        rid = request.headers["x-wl-request"]
        seen[rid] = json.loads(request.content)
        delta = [{"reasoning_content": "thinking"}, {"content": f"answer of {rid}"}]
        events = [{"choices": [{"delta": d}]} for d in delta]
        events.append({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5}})
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=body.encode(),
                              headers={"content-type": "text/event-stream"})
    return chat


def test_the_plan_waits_for_the_sub_agents_and_sizes_their_answers():
    plan = plan_of(LEAD)
    final = next(r for r in plan.requests if r.label == "final")
    subs = [r.id for r in plan.requests if r.label == "sub"]
    assert set(subs) <= set(final.deps)
    tools = [m for m in plan.messages if m.role == "tool"]
    assert [[s.kind for s in m.segs] for m in tools] == [["reply"], ["reply", "text"]]
    assert [m.segs[0].key for m in tools] == subs
    assert all(m.segs[0].tokens == 24 and m.segs[0].content_only for m in tools)


@pytest.mark.parametrize("ahead", [False, True])
def test_the_tool_messages_carry_each_sub_agents_answer(ahead: bool):
    seen: dict[str, dict] = {}
    plan = plan_of(LEAD)
    run, _ = execute(plan, answering(seen), ahead=ahead)
    assert all(r.error is None for r in run.records)
    final = next(r for r in plan.requests if r.label == "final")
    messages = seen[final.id]["messages"]
    calls = messages[2]["tool_calls"]
    subs = [r.id for r in plan.requests if r.label == "sub"]
    assert messages[3] == {"role": "tool", "content": f"answer of {subs[0]}",
                           "tool_call_id": calls[0]["id"]}
    assert messages[4] == {"role": "tool", "content": f"answer of {subs[1]}\n(checked)",
                           "tool_call_id": calls[1]["id"]}


@pytest.mark.parametrize("body, code", [
    ('user "x"; reply 4 as a; tool reply nope', "WL207"),
    ('user "x"; probe as a; user reply a; reply 4', "WL404"),
    ('user reply a; reply 4 as a', "WL404"),
])
def test_an_answer_that_cannot_be_sent_is_an_error(body: str, code: str):
    with pytest.raises(WorkloadError) as e:
        plan_of(f"workload w {{ session s {{ {body} }} }}")
    assert code in [d.code for d in e.value.diagnostics]


def test_a_named_text_cannot_carry_an_answer():
    source = api.Source(name="t.wl", text='workload w { text t = reply a\n'
                        ' session s { user "x"; reply 4 as a; user $t; reply 1 } }')
    with pytest.raises(WorkloadError) as e:
        api.parse_checked(source)
    assert "WL250" in [d.code for d in e.value.diagnostics]


def test_a_fork_branchs_answer_is_quoted_in_a_user_message():
    seen: dict[str, dict] = {}
    plan = plan_of("""workload drafts {
      session s {
        user "Draft a title."
        spawn 2 fork parallel as k label draft { reply 8 as title }
        user "The drafts were: ", reply title[0], " and ", reply title[1], ". Pick one."
        reply 8 label pick
      }
    }""")
    run, _ = execute(plan, answering(seen), ahead=True)
    assert all(r.error is None for r in run.records)
    drafts = [r.id for r in plan.requests if r.label == "draft"]
    pick = next(r for r in plan.requests if r.label == "pick")
    assert set(drafts) <= set(pick.deps)
    assert seen[pick.id]["messages"][-1] == {
        "role": "user", "content": f"The drafts were: answer of {drafts[0]} and answer of "
                                   f"{drafts[1]}. Pick one."}
