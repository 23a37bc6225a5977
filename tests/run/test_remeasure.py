"""Measured again alone (`run.remeasure`): which requests of a stretch timed alone can be
measured again (probes as they are, forks of filler with fresh filler; never the stretch's first,
whose moment has passed), when (a first-token stamp that may be late and is the prefill time; a
decode more than 1.5x slower than the stretch's first: the machine drifted), how often (at most
twice more, with a pause after a drift), and what the records and the run say of it. Clocks and
sleeps are injected."""

from __future__ import annotations

import asyncio
from collections import Counter

from workloadlang import api
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.run.errors import ErrorInfo
from workloadlang.run.remeasure import (
    PAUSES,
    TRIES,
    Remeasure,
    decode_pace,
    drift_of,
    repeatable,
    why_again,
)
from workloadlang.run.sse import Outcome


def agent_plan():
    source = api.load("agent-sim")
    return api.make_plan(api.parse_checked(source), source, {
        "sessions": "1", "main_tokens": "2k", "step_tokens": "1k", "sub_tokens": "1k",
        "finalize_tokens": "300"}, salt="again")


def outcome(rid: str, *, ttft: float = 0.02, decode_s: float = 0.03, n: int = 16,
            late: float | None = None, server_ms: float | None = None,
            timings: dict | None = None, error: bool = False) -> Outcome:
    return Outcome(id=rid, t_send=0.0, t_send_unix=0.0, ttft_s=ttft, ttft_late_s=late,
                   e2e_s=ttft + decode_s, completion_tokens=n, streamed_tokens=n,
                   server_prefill_ms=server_ms, timings=timings,
                   error=ErrorInfo(kind="http", message="x") if error else None)


def test_a_decode_pace_is_the_engine_s_own_when_it_says_and_long_enough_to_tell() -> None:
    assert decode_pace(outcome("a", decode_s=0.03, n=16)) == 0.002
    engine = outcome("a", timings={"predicted_ms": 60.0, "predicted_n": 16})
    assert decode_pace(engine) == 0.004
    assert decode_pace(outcome("a", decode_s=0.003, n=16)) is None, "a timer's noise"
    assert decode_pace(outcome("a", n=2)) is None and decode_pace(outcome("a", error=True)) is None
    assert drift_of(outcome("b", decode_s=0.09), outcome("a")) == 3.0


def test_why_a_request_is_measured_again() -> None:
    anchor = outcome("fin")
    late = why_again(outcome("b", late=0.002), anchor)
    assert late is not None and "stamp up to 2.0 ms late" in late[0] and late[1] == 0
    # its prefill time is the engine's own: the stamp does not decide anything
    assert why_again(outcome("b", late=0.002, server_ms=5.0), anchor) is None
    drift = why_again(outcome("b", decode_s=0.09), anchor)
    assert drift is not None and "decoded 3.0x slower than fin" in drift[0] and drift[1] > 0
    assert why_again(outcome("b", decode_s=0.04), anchor) is None, "within 1.5x"
    assert why_again(outcome("b", decode_s=0.01), anchor) is None, "faster: no try helps"
    assert why_again(outcome("b", late=0.002, error=True), anchor) is None


def test_re_reads_and_baselines_can_be_measured_again_and_the_main_turns_cannot() -> None:
    p = agent_plan()
    can = repeatable(p)
    labels = Counter(r.label for r in p.requests if r.id in can)
    # the finalize is a fork like the baselines: at run time, as its stretch's first, it is
    # the anchor and never measured again (`test_the_stretch_s_first_is_never_measured_again`)
    assert labels == {"cached": 3, "baseline": 3, "reread": 3, "finalize": 1}
    assert not any(r.label in ("main", "sub") for r in p.requests if r.id in can)


def run_settle(p, first: Outcome, then: list[Outcome], anchor_id: str):
    """Output: (the outcome kept, the Remeasure, the pauses slept) of settling `first` of
    the request `first.id` whose stretch began with `anchor_id`; each send again gives the next
    of `then`."""
    again, slept, sent = Remeasure(p, clock=lambda: 0.0, sleep=None), [], iter(then)

    async def sleep(s: float) -> None:
        slept.append(s)

    async def send():
        assert again.tries[first.id] >= 1, "the maker is told it is a try again"
        return next(sent), 0.0

    again.sleep = sleep
    req = p.by_id()[first.id]
    outcomes = {anchor_id: outcome(anchor_id)}
    kept = asyncio.run(again.settle(req, first, outcomes, {req.session: anchor_id}, send))
    return kept, again, slept


def test_a_late_stamp_is_measured_again_at_once_and_the_clean_try_kept() -> None:
    p = agent_plan()
    rid = next(r.id for r in p.requests if r.label == "cached")
    fin = next(r.id for r in p.requests if r.label == "finalize")
    kept, again, slept = run_settle(p, outcome(rid, late=0.003), [outcome(rid, ttft=0.01)], fin)
    assert kept.ttft_s == 0.01 and kept.ttft_late_s is None and slept == []
    assert again.notes[rid] == ["try 1: first-token stamp up to 3.0 ms late (TTFT 20.0 ms, "
                                "decode 2.000 ms/token)"]
    assert again.anchors[rid] == fin and again.tries == {}
    assert again.summary()["remeasured_requests"] == 1 and again.summary()["remeasures"] == 1


def test_a_drift_is_measured_again_after_pauses_at_most_twice_more() -> None:
    p = agent_plan()
    rid = next(r.id for r in p.requests if r.label == "baseline")
    fin = next(r.id for r in p.requests if r.label == "finalize")
    slow = outcome(rid, decode_s=0.09)
    kept, again, slept = run_settle(p, slow, [slow, slow, outcome(rid)], fin)
    assert kept is slow, "bounded: the last try is kept, still slow"
    assert len(again.notes[rid]) == TRIES - 1 and slept == list(PAUSES)


def test_of_tries_that_all_drifted_the_one_nearest_the_anchor_s_pace_is_kept() -> None:
    """A drift that grew over the tries: the send whose decode pace was nearest the anchor's
    was timed at the speed the anchor's was, and is kept; the record says which and why, and
    counts every send. Within the allowance, or with no earlier try nearer, the last is kept."""
    p = agent_plan()
    rid = next(r.id for r in p.requests if r.label == "baseline")
    fin = next(r.id for r in p.requests if r.label == "finalize")
    def counted(o: Outcome, prompt: int, cached: int) -> Outcome:
        return o.model_copy(update={"prompt_tokens": prompt, "cached_tokens": cached})

    first, worse = counted(outcome(rid, decode_s=0.1), 1, 0), counted(outcome(rid, decode_s=1.2), 100, 10)
    kept, again, _ = run_settle(p, first, [counted(outcome(rid, decode_s=0.6), 20, 2), worse], fin)
    assert kept is first, "3.3x off beats 20x and 40x off"
    notes = again.notes[rid]
    assert len(notes) == TRIES and notes[-1].startswith(
        f"kept send 1 of 3: decoded nearest {fin}'s pace; the last decoded 40.0x slower")
    assert again.sends[rid] == TRIES and again.summary()["remeasures"] == TRIES - 1
    # the sends not kept are the ones the engine counted beside the kept one
    assert again.earlier[rid] == (120, 12)
    # the last within the allowance: kept, even when an earlier one was nearer
    steady = outcome(rid, decode_s=0.04)
    kept, again, _ = run_settle(p, outcome(rid, decode_s=0.1), [outcome(rid, decode_s=0.2),
                                                                steady], fin)
    assert kept is steady and len(again.notes[rid]) == TRIES - 1
    # a try that failed is never kept over one that answered
    bad, drifted = outcome(rid, decode_s=0.1, error=True), outcome(rid, decode_s=0.3)
    kept, again, _ = run_settle(p, drifted, [bad], fin)
    assert kept is drifted and again.notes[rid][-1].endswith("the last failed (http)")
    kept, _, _ = run_settle(p, drifted, [outcome(rid, decode_s=0.6), bad], fin)
    assert kept is drifted, "of those that answered, the nearest"


def test_the_stretch_s_first_is_never_measured_again() -> None:
    p = agent_plan()
    fin = next(r.id for r in p.requests if r.label == "finalize")
    first = outcome(fin, late=0.003)
    kept, again, _ = run_settle(p, first, [], fin)
    assert kept is first and again.notes == {}


def test_a_fork_measured_again_sends_fresh_filler_of_its_size_and_a_probe_the_same() -> None:
    p = agent_plan()
    realiser = Realiser(p, RatioSizer(1.0))
    base = next(r for r in p.requests if r.label == "baseline")
    replies = {}
    sent = realiser.messages(base, replies)
    again = realiser.again(base, replies, 1)
    assert again[:-1] == sent[:-1], "the same context"
    assert again[-1]["content"] != sent[-1]["content"]
    assert len(again[-1]["content"].split()) == len(sent[-1]["content"].split())
    assert realiser.again(base, replies, 2)[-1] != again[-1]
    probe = next(r for r in p.requests if r.label == "cached")
    assert realiser.again(probe, replies, 1) == realiser.messages(probe, replies)


def test_the_tokens_of_sends_not_kept_are_on_the_records_side_of_the_counters() -> None:
    """The engine's counters hold every send, the discarded tries too: the run's `client` says
    what they counted, and the counters' cross-check adds it to what the records hold (a
    healthy engine is not said to have had another client)."""
    from workloadlang.run.runner import metrics_summary

    p = agent_plan()
    rid = next(r.id for r in p.requests if r.label == "baseline")
    fin = next(r.id for r in p.requests if r.label == "finalize")
    slow = outcome(rid, decode_s=0.09).model_copy(update={"prompt_tokens": 2600,
                                                          "cached_tokens": 1590})
    kept, again, _ = run_settle(p, slow, [outcome(rid)], fin)
    client = again.summary()
    assert client["remeasure_prompt_tokens"] == 2600
    assert client["remeasure_cached_tokens"] == 1590
    assert "remeasure_prompt_tokens" not in Remeasure(p, lambda: 0.0).summary()
    m = metrics_summary([], [], client)
    assert m.records_prompt_tokens == 2600 and m.records_cached_tokens == 1590


def settle_twins(p, times: list[list[float]], fin: str, server: bool = False):
    """Output: (the kept prefill times, the Remeasure) of settling the stretch's baselines in
    order, each answered with the prefill times of `times` in turn (its first send, then each
    send again), decoding at the finalize's pace."""
    again = Remeasure(p, clock=lambda: 0.0, sleep=None, floors=(0.005, 0.001))

    async def sleep(s: float) -> None:
        pass

    again.sleep = sleep
    outcomes = {fin: outcome(fin)}
    kept = []
    for req, ts in zip([r for r in p.requests if r.label == "baseline"], times):
        answers = iter(ts[1:])

        def make(t: float, rid: str = req.id) -> Outcome:
            return outcome(rid, ttft=t, server_ms=t * 1000 if server else None)

        async def send(rid: str = req.id, answers=answers) -> tuple[Outcome, float]:
            return make(next(answers), rid), 0.0

        got = asyncio.run(again.settle(req, make(ts[0]), outcomes, {req.session: fin}, send))
        outcomes[req.id] = got
        kept.append(got.ttft_s)
    return kept, again


def test_an_identical_request_slower_than_the_fastest_before_it_is_measured_again() -> None:
    """The baselines are the same work: one whose prefill time is more than 1.5x that of the
    fastest kept before it is measured again, after a pause, at most twice more; a faster one
    is not (of the same work the fastest counts, noise only adds time)."""
    p = agent_plan()
    fin = next(r.id for r in p.requests if r.label == "finalize")
    kept, again = settle_twins(p, [[1.0], [1.8, 1.1], [0.5]], fin)
    assert kept == [1.0, 1.1, 0.5]
    (notes,) = again.notes.values()
    assert len(notes) == 1 and "prefilled the same work 1.8x slower than" in notes[0]
    assert notes[0].endswith("baseline/0 (TTFT 1800.0 ms, decode 2.000 ms/token)")
    kept, again = settle_twins(p, [[1.0], [1.4], [0.8]], fin)
    assert kept == [1.0, 1.4, 0.8] and again.notes == {}, "within 1.5x of the fastest"
    # bounded: still slower after the tries, the last is kept
    kept, again = settle_twins(p, [[1.0], [2.0, 2.1, 2.2]], fin, server=True)
    assert kept == [1.0, 2.2] and len(next(iter(again.notes.values()))) == TRIES - 1


def test_times_near_nothing_do_not_disagree_by_their_noise() -> None:
    """What a timing resolves (5 ms over a TTFT) is added to each side: 1 ms against 3 ms is
    noise, not two speeds."""
    p = agent_plan()
    fin = next(r.id for r in p.requests if r.label == "finalize")
    kept, again = settle_twins(p, [[0.001], [0.003], [0.002]], fin)
    assert again.notes == {}
    # a baseline that drifted by its decode pace is read for itself, not as a twin
    anchor = outcome(fin)
    drifted = outcome("b", ttft=3.0, decode_s=0.09)
    assert why_again(outcome("c", ttft=1.0), anchor, [drifted]) is None
