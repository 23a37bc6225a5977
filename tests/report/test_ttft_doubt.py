"""Verdicts never drawn from a first-token stamp that may be late: a TTFT flagged `ttft_late_s`
(the first token came in a read of several packets, under the newest one's stamp) only decides
a TTFT-based verdict when every value it may really have had decides the same."""

from __future__ import annotations

from types import SimpleNamespace

from workloadlang.run.record import TtftReference, evidence

REF = TtftReference(threshold_s=0.1, threshold_tokens=2000, cold_prefill_tps=10_000.0)


def warm_step(contended_s: float | None = None, prefill_contended_s: float | None = None,
              **outcome: object) -> dict:
    """Output: the evidence of a warm step (2,000-token prompt, 1,900 expected from cache)."""
    req = SimpleNamespace(id="s/1", expected_cached=1900, prompt_tokens=2000)
    o = dict(prompt_tokens=2000, cached_tokens=1900, ttft_s=0.12, ttft_late_s=None,
             server_prefill_ms=None, completion_tokens=4, streamed_tokens=4, e2e_s=0.2)
    o.update(outcome)
    return evidence(req, SimpleNamespace(**o), None, None, 0.9, REF, contended_s,
                    prefill_contended_s)


def test_a_reported_hit_timed_like_a_recompute_disagrees_unless_the_stamp_may_be_late() -> None:
    # a cold prefill of 2,000 tokens takes 0.2 s here: a hit must come in under 0.1 s
    assert warm_step()["ttft_agrees"] is False
    assert warm_step(ttft_late_s=0.05)["ttft_agrees"] is None  # really 0.07-0.12 s: cannot tell
    assert warm_step(ttft_late_s=0.01)["ttft_agrees"] is False  # really 0.11-0.12 s: too slow
    assert warm_step(ttft_s=0.05, ttft_late_s=0.04)["ttft_agrees"] is True


def test_time_other_requests_were_in_flight_may_be_the_engines_on_them() -> None:
    """Without the engine's own prefill time, a TTFT that other requests of the run shared
    (`ttft_contended_s`) may be queueing: "recomputed" is not concluded from it."""
    assert warm_step(contended_s=0.05)["ttft_agrees"] is None  # own prefill 0.07-0.12 s
    assert warm_step(contended_s=0.01)["ttft_agrees"] is False  # 0.11-0.12 s: still too slow
    assert warm_step(contended_s=0.03, ttft_late_s=0.03)["ttft_agrees"] is None  # the two add
    assert warm_step(cached_tokens=None, contended_s=0.05)["hit"] is None  # a miss by TTFT too
    # the engine's own prefill time excludes its queue: not doubted
    assert warm_step(contended_s=0.1, server_prefill_ms=120.0)["ttft_agrees"] is False


def test_the_engines_own_prefill_time_allows_for_batches_shared_with_other_slots() -> None:
    """An engine running several requests at once (llama.cpp slots) shares its batches: its own
    prefill time holds the others' work for as long as they were in flight within it."""
    assert warm_step(server_prefill_ms=120.0)["ttft_agrees"] is False
    assert warm_step(server_prefill_ms=120.0, prefill_contended_s=0.05)["ttft_agrees"] is None
    assert warm_step(server_prefill_ms=120.0, prefill_contended_s=0.0)["ttft_agrees"] is False
    # the client-side doubts do not apply to the engine's own time, and the other way round
    assert warm_step(server_prefill_ms=120.0, contended_s=0.1)["ttft_agrees"] is False
    assert warm_step(prefill_contended_s=0.1)["ttft_agrees"] is False


def test_the_engines_own_prefill_time_is_not_doubted() -> None:
    out = warm_step(server_prefill_ms=120.0, ttft_late_s=0.05)
    assert out["prefill_source"] == "server" and out["ttft_agrees"] is False


def test_a_hit_judged_by_ttft_alone_is_unknown_when_the_stamp_may_be_late_across_the_threshold() -> None:
    assert warm_step(cached_tokens=None)["hit"] is False
    late = warm_step(cached_tokens=None, ttft_late_s=0.05)
    assert late["hit"] is None and late["hit_basis"] is None
    assert warm_step(cached_tokens=None, ttft_late_s=0.01)["hit"] is False
    assert warm_step(cached_tokens=None, ttft_s=0.08, ttft_late_s=0.05)["hit"] is True


def calibrate_with(monkeypatch, late_pairs: set[int], repeat: int = 3,  # noqa: ANN001, ANN201
                   late_bases: frozenset[int] = frozenset()):
    """Run `ttft_threshold` against a fake engine without prefill times of its own, whose cached
    twin's stamp may be 0.3 s late in the pairs `late_pairs`, and whose few-word prompt's may be
    in `late_bases`. Output: (the request ids sent, the Calibration)."""
    import asyncio

    from workloadlang.plan.realise import RatioSizer
    from workloadlang.run import calibrate
    from workloadlang.run.client import Endpoint, Outcome

    made = []

    async def send(client, endpoint, req):  # noqa: ANN001
        k = int(req.id.split("/")[2])
        hit, base = req.id.endswith("/hit"), req.id.endswith("/base")
        made.append(req.id)
        late = 0.3 if (k in late_pairs and hit) or (k in late_bases and base) else None
        ttft = 0.05 if hit else 0.01 if base else 1.0
        return Outcome(id=req.id, t_send=0.0, t_send_unix=0.0, e2e_s=1.0,
                       ttft_s=ttft + (0.3 if late else 0.0), ttft_late_s=late,
                       prompt_tokens=10 if base else 2000, cached_tokens=1990 if hit else 0)

    monkeypatch.setattr(calibrate, "send", send)
    cal = calibrate.Calibration()
    asyncio.run(calibrate.ttft_threshold(None, Endpoint(base_url="http://x/v1", model="m"),
                                         RatioSizer(1.0), "salt", 2000, repeat, cal))
    return made, cal


def test_a_calibration_pair_with_a_stamp_that_may_be_late_is_not_used_but_measured_again(
        monkeypatch) -> None:
    """The hit/miss threshold is drawn only from cold/cached twins whose TTFTs are their own: a
    pair with `ttft_late_s` is left out, with a note, and another pair with fresh text is sent
    in its place, so the run still has the clean pairs it asked for."""
    made, cal = calibrate_with(monkeypatch, late_pairs={0})
    assert len(made) == 12 and [m for m in made if m.endswith("/base")] == [
        f"calibrate/ttft/{k}/base" for k in range(4)]  # each pair after its few-word prompt
    assert cal.hit_ttft_s == [0.05] * 3 and cal.cold_ttft_s == [1.0] * 3
    assert any("probe 0 not used" in n and "300.0 ms" in n for n in cal.notes)
    assert cal.threshold_s is not None and cal.threshold_s < 1.0


def test_calibration_measures_again_at_most_twice_per_pair_wanted(monkeypatch) -> None:
    """A host on which every stamp may be late: 2 pairs wanted, 6 sent, none used, no threshold
    (the gates that need one say unknown, not a verdict from a range)."""
    made, cal = calibrate_with(monkeypatch, late_pairs=set(range(100)), repeat=2)
    assert len(made) == 18
    assert cal.hit_ttft_s == [] and cal.threshold_s is None
    assert "no threshold: no complete cold/cached pair" in cal.notes


def test_a_pair_whose_few_word_prompt_may_be_late_is_measured_again_for_the_cold_speed(
        monkeypatch) -> None:
    """Without the engine's prefill times the cold speed is over the cold twin's TTFT beyond the
    few-word prompt's: a late stamp there leaves no speed, so that pair is measured again."""
    made, cal = calibrate_with(monkeypatch, late_pairs=set(), repeat=2, late_bases=frozenset({1}))
    assert len(made) == 9  # pairs 0, 1 (its speed lost) and 2
    assert len(cal.cold_prefill_tps) == 2 and cal.fixed_s == [0.01, 0.01]
    assert any("probe 1's cold speed not used" in n and "300.0 ms" in n for n in cal.notes)
