"""A stretch timed alone measured again as a whole (`run.stretch`): when its anchor (agent-sim's
finalize) decoded at another speed than the identical requests that price it, the sub-agents
that pushed its context out are sent again with fresh filler, then the whole stretch; the
repeat is kept only when its anchor is a hit too, once per session; the records say so and the
run counts what it cost. Sends are faked; the executor's part runs on the simulator."""

from __future__ import annotations

import asyncio

from workloadlang import api
from workloadlang.run.remeasure import Remeasure
from workloadlang.run.sse import Outcome
from workloadlang.run.stretch import Held, Stretches, drifted, pressure


def agent_plan(**more: str):
    source = api.load("agent-sim")
    return api.make_plan(api.parse_checked(source), source, {
        "sessions": "1", "main_tokens": "2k", "step_tokens": "1k", "sub_tokens": "1k",
        "finalize_tokens": "300", **more}, salt="stretch")


def outcome(rid: str, *, ttft: float = 0.2, decode_s: float = 0.03, cached: int = 2000,
            prompt: int = 2400) -> Outcome:
    return Outcome(id=rid, t_send=0.0, t_send_unix=0.0, ttft_s=ttft, e2e_s=ttft + decode_s,
                   completion_tokens=16, streamed_tokens=16, prompt_tokens=prompt,
                   cached_tokens=cached)


def test_the_pressure_of_a_finalize_is_its_sub_agents_and_nothing_else_has_any() -> None:
    p = agent_plan()
    fin = next(r for r in p.requests if r.label == "finalize")
    subs = [r.id for r in p.requests if r.label == "sub"]
    got = pressure(p, fin)
    assert got is not None and [r.id for r in got] == subs
    # a main turn is extended by the next: it cannot be sent again with fresh filler
    assert all(pressure(p, r) is None for r in p.requests if r.label != "finalize")
    none = agent_plan(sub_windows="0")
    assert pressure(none, next(r for r in none.requests if r.label == "finalize")) is None


def test_an_anchor_that_ran_at_another_speed_than_its_price_is_said_to_have_drifted() -> None:
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    slow = [outcome(reqs[0].id, decode_s=0.3)] + [outcome(r.id) for r in reqs[1:]]
    why = drifted(Held(reqs, slow))
    assert why is not None and "decoded 10.0x slower than the 3 identical requests" in why
    fast = [outcome(reqs[0].id, decode_s=0.01)] + [outcome(r.id) for r in reqs[1:]]
    assert "3.0x faster" in (drifted(Held(reqs, fast)) or "")
    steady = [outcome(reqs[0].id, decode_s=0.04)] + [outcome(r.id) for r in reqs[1:]]
    assert drifted(Held(reqs, steady)) is None, "within 1.5x"
    # one baseline's pace is not enough to say so
    assert drifted(Held(reqs[:-2], slow[:-2])) is None


def run_end(p, first: list[Outcome], answers: dict[str, list[Outcome]], hit=None):
    """Output: (the kept (request, outcome) pairs, the Stretches, the ids sent again in order)
    of the back stretch of `p` answered with `first`, each send again giving the next of
    `answers[id]`."""
    again = Remeasure(p, clock=lambda: 0.0)

    async def nap(s: float) -> None:
        pass

    again.sleep = nap
    hit = hit or (lambda r, o: (o.cached_tokens or 0) >= 1000)
    reqs = [r for r in p.requests if r.phase == "back"]
    sess = reqs[0].session
    outcomes = {o.id: o for o in first}
    sent: list[str] = []

    async def send(r):
        sent.append(f"{r.id}@{again.tries.get(r.id)}")
        return answers[r.id].pop(0), 0.0

    st = Stretches(p, again, hit, send, {sess: reqs[0].id}, outcomes)
    for r, o in zip(reqs, first):
        assert st.hold(r, o, reqs[0].id)
    kept = asyncio.run(st.end(sess))
    return kept, st, sent, again, reqs


def test_a_drifted_finalize_is_measured_again_with_its_sub_agents_and_the_repeat_kept() -> None:
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    subs = [r.id for r in p.requests if r.label == "sub"]
    first = [outcome(reqs[0].id, ttft=0.9, decode_s=0.3)] + [outcome(r.id) for r in reqs[1:]]
    answers = {r.id: [outcome(r.id, ttft=0.3 if r is reqs[0] else 0.2)] for r in reqs}
    answers.update({s: [outcome(s, cached=10, prompt=1000)] for s in subs})
    kept, st, sent, again, _ = run_end(p, first, answers)
    # the sub-agents first, then the stretch in order, each with filler of a fresh try
    assert sent == [f"{s}@1" for s in subs] + [f"{r.id}@1" for r in reqs]
    assert [o.ttft_s for _, o in kept][:2] == [0.3, 0.2], "the repeat's outcomes"
    fin_notes = again.notes[reqs[0].id]
    assert fin_notes == [f"stretch measured again: {reqs[0].id} decoded 10.0x slower than the "
                         "3 identical requests that price it; the second kept"]
    assert again.sends[reqs[0].id] == 2 and again.sends[reqs[-1].id] == 2
    assert again.earlier[reqs[0].id] == (2400, 2000), "the first send counted, not kept"
    assert st.summary() == {"stretches_again": 1, "stretches_again_kept": 1,
                            "pressure_again": 2}
    # the engine counted every send: those not kept and the pressure's are beside the records
    assert again.summary()["remeasure_prompt_tokens"] == 7 * 2400 + 2000, "the first round"
    assert again.summary()["remeasures"] == len(subs) + len(reqs), "every send again counted"
    # once per session
    assert not st.hold(reqs[0], first[0], reqs[0].id)


def test_a_steady_stretch_is_kept_as_it_is_and_a_miss_never_gets_a_second_chance() -> None:
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    steady = [outcome(r.id) for r in reqs]
    kept, st, sent, again, _ = run_end(p, steady, {})
    assert sent == [] and [o for _, o in kept] == steady and st.summary() == {}
    miss = [outcome(reqs[0].id, decode_s=0.3, cached=0)] + [outcome(r.id) for r in reqs[1:]]
    kept, st, sent, again, _ = run_end(p, miss, {})
    assert sent == [] and [o for _, o in kept] == miss


def test_a_repeat_whose_finalize_lost_its_context_keeps_the_planned_stretch() -> None:
    """The second time the context was pushed out under more than the planned pressure: the
    first stretch (the planned experiment, a hit) is kept, and its note says what the second
    time showed."""
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    subs = [r.id for r in p.requests if r.label == "sub"]
    first = [outcome(reqs[0].id, ttft=0.9, decode_s=0.3)] + [outcome(r.id) for r in reqs[1:]]
    answers = {r.id: [outcome(r.id, cached=0 if r is reqs[0] else 2000)] for r in reqs}
    answers.update({s: [outcome(s, cached=10, prompt=1000)] for s in subs})
    kept, st, sent, again, _ = run_end(p, first, answers)
    assert [o for _, o in kept] == first
    assert again.notes[reqs[0].id][-1].endswith(
        "the second time it was not a hit (cached 0 of 2400): the first kept")
    assert st.summary()["stretches_again_kept"] == 0
    assert again.earlier[reqs[0].id] == (2400, 0), "the second's send counted, not kept"


def test_a_repeat_whose_finalize_came_from_a_nearer_tier_keeps_the_first() -> None:
    """The first finalize was slow (a slow host tier) and decoded 3x slower than its
    baselines; the second, at the baselines' speed, is a hit that prefilled 5x faster than the
    first did once scaled to that speed (its context stayed on the device: the sub-agents sent
    again pushed other blocks out). It did not repeat the experiment: the first is kept, so the
    slow restore is judged, and the note says why. Scaled to the same speed, a repeat within
    the allowance is kept."""
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    subs = [r.id for r in p.requests if r.label == "sub"]
    first = [outcome(reqs[0].id, ttft=0.9, decode_s=0.09)] + [outcome(r.id) for r in reqs[1:]]
    for ttft, kept_first in ((0.06, True), (0.25, False)):
        answers = {r.id: [outcome(r.id, ttft=ttft if r is reqs[0] else 0.2)] for r in reqs}
        answers.update({s: [outcome(s, cached=10, prompt=1000)] for s in subs})
        kept, st, _, again, _ = run_end(p, first, answers)
        assert ([o for _, o in kept] == first) == kept_first, ttft
        assert st.summary()["stretches_again_kept"] == (0 if kept_first else 1)
    kept, st, _, again, _ = run_end(p, first, {
        **{r.id: [outcome(r.id, ttft=0.06 if r is reqs[0] else 0.2)] for r in reqs},
        **{s: [outcome(s, cached=10, prompt=1000)] for s in subs}})
    assert again.notes[reqs[0].id][-1].endswith(
        "the second time it prefilled 5.0x faster than the first would have at its speed "
        "(60.0 ms against 300.0 ms): not the same experiment, the first "
        "kept"), again.notes[reqs[0].id]


def test_a_repeat_on_a_slower_machine_is_kept_unless_it_prefilled_faster_outright() -> None:
    """The first finalize decoded 3x faster than its baselines (the machine slowed after it);
    the second, at the baselines' speed, is taken as no slower than the first (a decode slows
    far more than a prefill on a shared CPU): a second 1.2x faster than the first is kept, one
    2x faster outright came from a nearer place and is not."""
    p = agent_plan()
    reqs = [r for r in p.requests if r.phase == "back"]
    subs = [r.id for r in p.requests if r.label == "sub"]
    first = [outcome(reqs[0].id, ttft=0.3, decode_s=0.01)] + [outcome(r.id) for r in reqs[1:]]
    for ttft, kept_first in ((0.25, False), (0.15, True)):
        answers = {r.id: [outcome(r.id, ttft=ttft if r is reqs[0] else 0.2)] for r in reqs}
        answers.update({s: [outcome(s, cached=10, prompt=1000)] for s in subs})
        kept, st, _, again, _ = run_end(p, first, answers)
        assert ([o for _, o in kept] == first) == kept_first, ttft
        if kept_first:
            assert "prefilled 2.0x faster than the first would have" in again.notes[reqs[0].id][-1]


def test_only_a_run_of_one_session_measures_a_stretch_again() -> None:
    """With two sessions the pressure that pushed a context out was the other's too."""
    again = Remeasure(agent_plan(), clock=lambda: 0.0)
    assert Stretches(agent_plan(), again, lambda r, o: True, None, {}, {}).can  # type: ignore
    two = agent_plan(sessions="2")
    assert not Stretches(two, Remeasure(two, clock=lambda: 0.0), lambda r, o: True,
                         None, {}, {}).can  # type: ignore
