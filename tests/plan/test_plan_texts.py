"""plan: texts are counted before they are made, and a long text is held once.

Input: `.wl` texts with a 900 KB literal (or a named text holding it) sent by 1,000 session
copies, named texts that double at each step, a chain of 8,000 named texts, a string param
that doubles at each step. Output checked: the plan's table of texts holds the long text once
(its JSON and its traced peak memory stay small), the realised prompt is the text; a doubling
text is WL408 before it is made; a long chain plans; a doubling string is WL404.
"""

from __future__ import annotations

import tracemalloc

import pytest

from workloadlang import api
from workloadlang.diagnostics import WorkloadError
from workloadlang.plan.assemble import PLAN_JSON
from workloadlang.plan.realise import Realiser

BIG = "x" * 900_000


def plan_of(text: str):
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, {}, salt="s")


def traced(text: str):
    """Plan `text` under tracemalloc. Output: (plan, peak bytes traced)."""
    tracemalloc.start()
    try:
        plan = plan_of(text)
        return plan, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def errors_of(text: str):
    with pytest.raises(WorkloadError) as exc:
        plan_of(text)
    return exc.value.diagnostics


@pytest.mark.parametrize("text", [
    f'workload w {{ session s repeat 1000 {{ user "{BIG}"; reply 1 }} }}',
    f'workload w {{ text big = "{BIG}"\n session s repeat 1000 {{ user $big; reply 1 }} }}',
], ids=["literal", "named text"])
def test_a_long_text_sent_a_thousand_times_is_held_once(text: str):
    """Was 1.8 GB for `wl plan` (the text in every message of the plan's JSON and hash)."""
    plan, peak = traced(text)
    assert plan.texts == (BIG,)
    segs = [s for m in plan.messages for s in m.segs if s.kind == "text"]
    assert len(segs) == 1000 and {(s.ref, s.text) for s in segs} == {(0, "")}
    assert len(PLAN_JSON.dump_json(plan)) < 2_000_000
    assert peak < 60_000_000, f"{peak:,} bytes traced"
    prompt = Realiser(plan).messages(plan.requests[-1], {})
    assert prompt == [{"role": "user", "content": BIG}]


def test_a_short_text_stays_in_its_segment():
    plan = plan_of('workload w { session s repeat 2 { user "hello"; reply 1 } }')
    assert plan.texts == () and plan.messages[0].segs[0].text == "hello"
    assert b'"texts"' not in PLAN_JSON.dump_json(plan)  # nothing added to plans without one


def test_equal_long_texts_share_a_place_and_a_cache_prefix():
    text = f'workload w {{ text a = "{BIG}"\n session s repeat 2 {{ user $a; reply 1 }}\n' \
           f'session t {{ user "{BIG}"; reply 1 }} }}'
    plan = plan_of(text)
    assert plan.texts == (BIG,)
    t = next(r for r in plan.requests if r.session == "t#0")
    assert t.prompt_tokens == plan.requests[0].prompt_tokens


def doubling(steps: int) -> str:
    texts = "".join(f"text t{i} = $t{i - 1}, $t{i - 1}\n" for i in range(1, steps + 1))
    return f'workload w {{ text t0 = "abcdefghij"\n{texts}session s {{ user $t{steps}; reply 4 }} }}'


def test_a_text_that_doubles_at_each_step_is_refused_before_it_is_made():
    """Was a MemoryError at 3.2 GB: its parts are counted from the workload first."""
    tracemalloc.start()
    try:
        (diag,) = errors_of(doubling(29))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert diag.code == "WL408" and diag.span.line == 31
    assert "536,870,912 parts" in diag.message and "--max-requests" in diag.hint
    assert peak < 30_000_000, f"{peak:,} bytes traced"


def test_a_doubling_text_within_the_limit_is_planned():
    plan = plan_of(doubling(10))
    assert len(plan.messages[0].segs) == 1024


def test_a_chain_of_eight_thousand_texts_is_planned():
    """Was a RecursionError: each text is made after the texts it reads, without recursion."""
    texts = "".join(f"text t{i} = $t{i - 1}\n" for i in range(1, 8000))
    plan = plan_of(f'workload w {{ text t0 = "end"\n{texts}session s {{ user $t7999; reply 4 }} }}')
    assert [s.text for s in plan.messages[0].segs] == ["end"]


def test_messages_whose_parts_add_up_past_the_limit_are_refused_by_their_first_iteration():
    parts = ", ".join(['"p"'] * 30)
    (diag,) = errors_of(f'workload w {{ session s {{\n repeat 40000 {{ user {parts}; reply 1 }} }} }}')
    assert diag.code == "WL408" and diag.span.line == 2 and "more parts" in diag.message


def test_a_string_that_doubles_at_each_step_is_a_plan_error():
    """Was a MemoryError: `+` of two strings (or lists) is refused past 10 MiB before it is
    made."""
    chain = "".join(f"p{i}: string = $p{i - 1} + $p{i - 1}\n" for i in range(1, 41))
    errs = errors_of(f'workload w {{ params {{ p0: string = "ab"\n{chain}}}\n'
                     'session s { user $p40; reply 4 } }')
    assert any(d.code == "WL404" and "the string would be 16,777,216 characters" in d.message
               for d in errs), errs
