"""What the source alone shows about a session's statements in order is found by `wl check`,
not only by `wl plan`: a `tool` message that can answer no call (WL430), `keep INDEX` beyond
the spawn (WL431), no request at all (WL410), a `wait` that ends a phase or a session (WL236)."""

from __future__ import annotations

import pytest

from tests.checkhelp import check_codes
from workloadlang import api
from workloadlang.diagnostics import WorkloadError


def codes(text: str) -> list[str]:
    return [c for c, _ in check_codes(f"workload w {{ {text} }}")]


def plan_codes(text: str) -> list[str]:
    source = api.Source(name="t.wl", text=f"workload w {{ {text} }}")
    try:
        api.make_plan(api.parse(source.text, "t.wl"), source, {}, salt="s")
    except WorkloadError as e:
        return [d.code for d in e.diagnostics]
    return []


CERTAIN = [
    'session s { user "x"; tool "r"; reply 4 }',
    'session s { user "x"; reply 4; tool "r"; reply 4 }',
    'session s { assistant "a", call f; tool "r"; tool "again"; reply 4 }',
    'session s { assistant "a", call f; assistant "b"; tool "r"; reply 4 }',
    'session s { user "x"; reply 4 call f; fresh { tool "r"; reply 4 } }',
    'session s { user "x"; reply 4 call f; spawn 2 cold { tool "r"; reply 4 } }',
    'params { n: int = 2 } session s { user "x"; repeat $n { tool "r"; reply 4 call f } }',
    'params { b: bool = true } session s { user "x"; if $b { reply 4 } else { reply 4 } '
    'tool "r"; reply 4 }',
]


@pytest.mark.parametrize("text", CERTAIN)
def test_a_tool_message_that_can_answer_no_call_is_found_by_check(text: str):
    assert codes(text) == ["WL430"]
    assert set(plan_codes(text)) == {"WL430"}  # the planner agrees (once per branch)


POSSIBLE = [
    'session s { user "x"; reply 4 call f; tool "r"; reply 4 }',
    'session s { assistant "a", call f, call g; tool "r"; tool "r2"; reply 4 }',
    'session s { user "x"; reply 4 call f; spawn 2 fork { tool "r"; reply 4 } }',
    'session s { user "x"; reply 4 call f; user "meanwhile"; tool "r"; reply 4 }',
    'session s { user "x"; reply 4 call f; probe; tool "r"; reply 4 }',
    'session s { user "x"; reply 4 call f; tool "r"; repeat 2 { reply 4 call g; tool "r" } '
    'reply 4 }',
    'session s { user "x"; reply 4 call f; spawn 1 fork keep 0 { reply 4 call g } tool "r"; '
    'reply 4 }',
]


@pytest.mark.parametrize("text", POSSIBLE)
def test_a_tool_message_after_a_call_passes(text: str):
    assert codes(text) == []
    assert plan_codes(text) == []


def test_what_only_the_params_decide_is_left_to_the_plan():
    text = ('params { calls: bool = false } session s { user "x"; '
            'if $calls { reply 4 call f } else { reply 4 } tool "r"; reply 4 }')
    assert codes(text) == []
    assert plan_codes(text) == ["WL430"]


def test_keep_beyond_a_written_count_is_found_by_check():
    text = 'session s { user "x"; spawn 2 fork keep 2 { reply 4 } reply 4 }'
    assert check_codes(f"workload w {{ {text} }}") == [
        ("WL431", "`keep 2` names no branch: the spawn has 2 (0 to 1)")]
    assert codes(text.replace("keep 2", "keep 1")) == []


def test_a_workload_whose_sessions_send_nothing_is_found_by_check():
    assert codes('session s { user "x" } session t { system "y"; wait 1s }') == ["WL410"]
    assert codes('session s { user "x" } session t { user "y"; probe }') == []


def test_a_wait_that_ends_a_phase_warns_with_the_fix():
    text = ('session victim { phase warm { user filler 100; reply 4 } phase idle { wait 1s } '
            'phase resume { user "back"; reply 4 } } '
            'session flood { phase idle { user filler 100; reply 4 } }')
    ((code, message),) = check_codes(f"workload w {{ {text} }}")
    assert code == "WL236" and "ends phase `idle` of session `victim`" in message
    assert "counted after the phase's barrier" in message
    fixed = text.replace("phase idle { wait 1s } phase resume { user", "phase idle { wait 1s; user")
    assert codes(fixed) == []


@pytest.mark.parametrize("text", [
    'session s { phase p { user "x"; reply 4; wait 1s } phase q { user "y"; reply 4 } }',
    'session s { user "x"; reply 4; wait 500ms }',
    'session s { phase p { user "x"; reply 4; turn t { wait 1s } } phase q { reply 4 } }',
])
def test_a_trailing_wait_warns(text: str):
    assert codes(text) == ["WL236"]


@pytest.mark.parametrize("text", [
    'session s { phase p { repeat 3 { user "x"; reply 4; wait 1s } } phase q { reply 4 } }',
    'session s { wait 1s; phase p { user "x"; reply 4 } }',
    'session s { user "x"; reply 4; wait 1s; if true { reply 4 } }',
    'session s { phase p { user "x"; reply 4; wait 1s; turn t { reply 4 } } }',
    'session s { user "x"; spawn 2 fork parallel { reply 4; wait 1s } reply 4 }',
])
def test_a_wait_before_a_request_is_fine(text: str):
    assert codes(text) == []
