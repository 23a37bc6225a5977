"""realise: planned prompts -> chat messages (text), lazily, per request.

Checked: the same (salt, key) gives the same bytes in any realiser; a grown conversation's
messages are a byte prefix of the next request's; ExactSizer reaches the planned token count
through a fake tokenizer; a needle lands at its depth; replies are replayed, stood in for
(synthetic, with the reply's length) or marked missing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from workloadlang import api
from workloadlang.plan import synth
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.realise import NO_OUTPUT, ExactSizer, RatioSizer, Realiser


@dataclass
class Reply:
    content: str
    reasoning: str = ""
    completion_tokens: int | None = None


def plan_of(text: str, salt: str = "r", **params: str) -> Plan:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt=salt)


def fake_count(words_factor: float = 1.3):
    """A tokenizer that counts round(words × factor) tokens, and how often it was asked."""
    calls: list[int] = []

    async def count(text: str) -> int:
        calls.append(len(text))
        return round(len(text.split()) * words_factor)

    return count, calls


GROWING = """workload w { session main repeat 2 {
    system "You are a helpful assistant."
    grow until 5k by 1k label main { user filler 1k; reply 16 replay }
    spawn 2 cold label sub { user filler 2k; reply 8 }
    turn finalize { user filler 500; reply 16 }
} }"""


def replies_for(plan: Plan) -> dict[str, Reply]:
    return {r.id: Reply(content=f"answer to {r.id}", completion_tokens=r.max_tokens // 2)
            for r in plan.requests}


# ---------------------------------------------------------------- determinism and prefixes


def test_same_salt_and_key_same_bytes_in_any_realiser():
    plan, again = plan_of(GROWING, salt="s1"), plan_of(GROWING, salt="s1")
    replies = replies_for(plan)
    a, b = Realiser(plan), Realiser(again, RatioSizer())
    for r, r2 in zip(plan.requests, again.requests):
        assert json.dumps(a.messages(r, replies)) == json.dumps(b.messages(r2, replies))
    other = Realiser(plan_of(GROWING, salt="s2"))
    first = plan.requests[0]
    assert a.messages(first, {})[1]["content"] != other.messages(first, {})[1]["content"]


def test_filler_is_a_pure_function_of_salt_key_and_length():
    assert synth.filler("s", "k", 500) == synth.filler("s", "k", 500)
    assert synth.filler("s", "k", 800).startswith(synth.filler("s", "k", 500) + " ")
    assert synth.filler("s", "k", 500) != synth.filler("s", "k2", 500)
    assert synth.filler("s", "k", 500) != synth.filler("t", "k", 500)
    assert len(synth.filler("s", "k", 500).split()) == 500


@pytest.mark.parametrize("n", [0, 1, 2, 3, 255, 4096])
def test_filler_text_is_pinned_to_its_definition(n: int):
    """Word i is WORDS[byte i of SHAKE-256(salt NUL name)]: runs replayed with a salt realise
    the same bytes whatever the implementation (or its speed-ups) of the day."""
    import hashlib

    digest = hashlib.shake_256(b"salt\0main#0:main#0/1").digest(n)
    expected = " ".join(synth.WORDS[b] for b in digest)
    assert synth.filler("salt", "main#0:main#0/1", n) == expected
    assert synth.words("salt", "main#0:main#0/1", n) == (expected.split() if n else [])
    assert synth.filler("s", "k", 3) == "coast seed tower"


def test_a_grown_conversation_is_a_byte_prefix_of_the_next_request():
    plan = plan_of(GROWING)
    realiser, replies = Realiser(plan), replies_for(plan)
    for session in ("main#0", "main#1"):
        convo = [r for r in plan.requests if r.session == session and r.label in ("main",
                                                                                  "finalize")]
        for prev, cur in zip(convo, convo[1:]):
            a, b = realiser.messages(prev, replies), realiser.messages(cur, replies)
            assert b[:len(a)] == a
            assert json.dumps(b).startswith(json.dumps(a)[:-1])
            # ...followed by the previous request's reply, verbatim.
            assert b[len(a)] == {"role": "assistant", "content": f"answer to {prev.id}"}


def test_sub_agents_and_sessions_realise_different_text():
    plan = plan_of(GROWING)
    realiser = Realiser(plan)
    users = [m["content"] for r in plan.requests if r.label == "sub"
             for m in realiser.messages(r, {}) if m["role"] == "user"]
    assert len(users) == 4 and len(set(users)) == 4
    words = [set(zip(u.split(), u.split()[1:], u.split()[2:], u.split()[3:])) for u in users]
    for i, a in enumerate(words):  # no 4-word run in common beyond chance
        for b in words[i + 1:]:
            assert len(a & b) < 20


def test_realised_messages_are_cached_per_message_and_not_recomputed():
    plan = plan_of(GROWING)
    realiser = Realiser(plan)
    last = [r for r in plan.requests if r.label == "finalize"][0]
    one = realiser.messages(last, replies_for(plan))
    two = realiser.messages(last, replies_for(plan))
    assert one == two and one[1] is two[1]  # the static system/user messages are reused


# ---------------------------------------------------------------- sizing


def test_ratio_sizer_words():
    assert RatioSizer(1.0).words_for("k", 1000) == 1000
    assert RatioSizer(1.3).words_for("k", 1300) == 1000
    assert RatioSizer(0.5).words_for("k", 7) == 14
    plan = plan_of('workload w { session s { user filler 2600; reply 4 } }')
    (msg,) = Realiser(plan, RatioSizer(1.3)).messages(plan.requests[0], {})
    assert len(msg["content"].split()) == 2000


@pytest.mark.parametrize("guess", [1.0, 1.3, 0.8, 2.5])
@pytest.mark.parametrize("tokens", [40, 1000, 5000, 40_000])
def test_exact_sizer_reaches_the_planned_token_count(guess: float, tokens: int):
    count, calls = fake_count(1.3)
    sizer = ExactSizer(count, tokens_per_word=guess)
    render = lambda n: synth.filler("s", "k", n)  # noqa: E731
    asyncio.run(sizer.prepare("k", tokens, render))
    words = sizer.words_for("k", tokens)
    assert sizer.measured["k"] == round(words * 1.3)
    assert abs(sizer.measured["k"] - tokens) <= 1  # one word is 1.3 tokens: can't do better
    assert len(calls) <= 3
    asyncio.run(sizer.prepare("k", tokens, render))  # sized once per key
    assert len(calls) <= 3


def test_exact_sizer_through_the_realiser_sizes_every_filler():
    plan = plan_of(GROWING)
    count, calls = fake_count(1.3)
    realiser = Realiser(plan, ExactSizer(count, tokens_per_word=1.0))
    last = [r for r in plan.requests if r.session == "main#0" and r.label == "finalize"][0]
    asyncio.run(realiser.prepare(last))
    fillers = [(m, s) for i in plan.message_ids(last) for m in [plan.messages[i]] for s in m.segs
               if s.kind == "filler"]
    assert len(fillers) == 6
    realised = realiser.messages(last, replies_for(plan))
    for (_msg, seg), text in zip(fillers, [m["content"] for m in realised if m["role"] == "user"]):
        assert abs(round(len(text.split()) * 1.3) - seg.tokens) <= 1, seg.key
    asked = len(calls)
    asyncio.run(realiser.prepare(last))
    assert len(calls) == asked and asked <= 3 * len(fillers)


def test_exact_sizer_tiny_filler_gets_at_least_one_word():
    count, _ = fake_count(1.0)
    sizer = ExactSizer(count, tokens_per_word=3.0)
    asyncio.run(sizer.prepare("k", 1, lambda n: synth.filler("s", "k", n)))
    assert sizer.measured["k"] == 1


# ---------------------------------------------------------------- needles, replies


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.8, 1.0])
def test_needle_is_inserted_at_its_depth(depth: float):
    plan = plan_of(f"""workload w {{ session s {{
        user filler 1000 needle at {depth}, "Where is the code?"
        reply 32 drop expect reply contains needle }} }}""")
    (req,) = plan.requests
    (msg,) = Realiser(plan).messages(req, {})
    (expect,) = req.expect
    sentence = synth.needle_sentence(expect.text)
    text = msg["content"]
    assert text.count(sentence) == 1 and text.endswith("Where is the code?")
    filler = text[: -len("Where is the code?")]
    assert len(filler.split()) == 1000  # the needle's words count toward the filler's size
    before = filler[: filler.index(sentence)].split()
    assert abs(len(before) - depth * (1000 - len(sentence.split()))) <= 1


def test_needle_code_is_salted_and_names_its_filler():
    a = plan_of('workload w { session s { user filler 100 needle at 50%; reply 8 drop '
                'expect reply contains needle } }', salt="a")
    b = plan_of('workload w { session s { user filler 100 needle at 50%; reply 8 drop '
                'expect reply contains needle } }', salt="b")
    (ea,), (eb,) = a.requests[0].expect, b.requests[0].expect
    assert ea.text != eb.text and ea.text in Realiser(a).messages(a.requests[0], {})[0]["content"]


SYNTHETIC = """workload w { session s {
    user filler 100; reply 16 synthetic label a
    user "next"; reply 4 label b } }"""


def test_synthetic_replay_stands_in_with_the_replys_length():
    plan = plan_of(SYNTHETIC)
    a, b = plan.requests
    realiser = Realiser(plan)
    got = realiser.messages(b, {a.id: Reply(content="the real reply", completion_tokens=12)})
    stand_in = got[1]
    assert stand_in["role"] == "assistant" and "real reply" not in stand_in["content"]
    assert len(stand_in["content"].split()) == 12
    again = Realiser(plan).messages(b, {a.id: Reply(content="other", completion_tokens=12)})
    assert again[1] == stand_in  # salted and deterministic, independent of what was said
    unknown = Realiser(plan).messages(b, {a.id: Reply(content="x", completion_tokens=None)})
    assert len(unknown[1]["content"].split()) == 16  # no usage: the planned size


def test_replayed_reply_keeps_reasoning_apart():
    plan = plan_of('workload w { session s { user "q"; reply 16 label a; user "n"; reply 4 } }')
    a, b = plan.requests
    msgs = Realiser(plan, reasoning_key="reasoning").messages(
        b, {a.id: Reply(content="yes", reasoning="thought")})
    assert msgs[1] == {"role": "assistant", "content": "yes", "reasoning": "thought"}


def test_a_missing_or_empty_reply_is_marked():
    plan = plan_of('workload w { session s { user "q"; reply 16 label a; user "n"; reply 4 } }')
    a, b = plan.requests
    assert Realiser(plan).messages(b, {})[1]["content"] == NO_OUTPUT
    assert Realiser(plan).messages(b, {a.id: Reply(content="")})[1]["content"] == NO_OUTPUT


def test_partial_turn_of_an_aborted_request_is_replayed():
    plan = plan_of("""workload w { session s {
        user filler 100; reply 2k abort after 50 label prime; probe label again } }""")
    prime, again = plan.requests
    msgs = Realiser(plan).messages(again, {prime.id: Reply(content="Let me thi",
                                                           reasoning="Weigh four")})
    assert msgs[-1] == {"role": "assistant", "content": "Let me thi",
                        "reasoning_content": "Weigh four"}


def _requests(plan: Plan, label: str) -> list[PRequest]:
    return [r for r in plan.requests if r.label == label]


def test_realising_the_default_agent_sim_plan_sizes_every_prompt():
    """Every prompt of the bundled agent-sim plan realises to its planned filler words."""
    source = api.load("agent-sim")
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="r")
    realiser, replies = Realiser(plan, RatioSizer(1.0)), replies_for(plan)
    for r in _requests(plan, "finalize") + _requests(plan, "sub"):
        msgs = realiser.messages(r, replies)
        users = sum(len(m["content"].split()) for m in msgs if m["role"] == "user")
        planned = sum(s.tokens for i in plan.message_ids(r) for s in plan.messages[i].segs
                      if s.kind == "filler" and plan.messages[i].role == "user")
        assert users == planned


def test_encoding_ahead_renders_a_requests_new_text_and_changes_nothing(monkeypatch):
    """`encoded` without the reply (the executor calls it while the request before is in
    flight) renders the filler of a request whose reply is not in yet; `messages` then renders
    nothing, same bytes."""
    plan = plan_of(GROWING)
    replies = replies_for(plan)
    second = next(r for r in plan.requests if r.label == "main" and r.index == 1)
    cold = Realiser(plan).messages(second, replies)
    realiser = Realiser(plan)
    realiser.encoded(second, {}, lambda m: json.dumps(m).encode())  # no reply needed
    rendered: list[str] = []
    real = synth.filler
    monkeypatch.setattr(synth, "filler", lambda *a: rendered.append(a[1]) or real(*a))
    assert realiser.messages(second, replies) == cold
    assert rendered == []


def test_a_message_carrying_replies_is_made_once_all_are_in_and_not_before():
    """An assistant message is final once every reply it carries is in: made once, then
    reused. Before that it is made again at each use, the missing reply marked, and
    `can_realise` says no."""
    plan = plan_of('workload w { session s { user "q"; reply 16 label a; user "n"; reply 4 } }')
    a, b = plan.requests
    realiser = Realiser(plan)
    assert not realiser.can_realise(b, {})
    assert realiser.messages(b, {})[1]["content"] == NO_OUTPUT
    replies = {a.id: Reply(content="yes")}
    assert realiser.can_realise(b, replies)
    one, two = realiser.messages(b, replies), realiser.messages(b, replies)
    assert one[1] == {"role": "assistant", "content": "yes"}
    assert one[1] is two[1] and one[0] is two[0]  # made once
    assert realiser.messages(b, {a.id: Reply(content="other")})[1]["content"] == "yes"
