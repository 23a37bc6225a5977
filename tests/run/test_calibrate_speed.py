"""The cold prefill speed that `ttft_agrees` (the `timing` gate's evidence) judges by.

A calibration probe is small (500 tokens by default), so much of its TTFT is what any request
costs here besides its prefill: sending, scheduling, the first decode step. On a loaded host
that was 8.5 ms of a 13 ms cold probe; a speed over the whole TTFT came out ~3x too slow, a cold
prefill of an 8k context ~3x too dear, and an engine that recomputed every "cached" re-read
(88 ms) was judged to agree with its claim. The speed is over what the cold twin took beyond a
fresh few-word prompt sent just before it (cold too, whatever the engine's cache does), and
that fixed cost is allowed for once. What is taken off is the fastest few-word TTFT of the
calibration: one slowed by noise would leave its cold twin too little time and a speed several
times the engine's."""

from __future__ import annotations

from types import SimpleNamespace

from workloadlang.run.calibrate import Calibration, cold_speed, fastest_base
from workloadlang.run.record import evidence
from workloadlang.run.runner import reference


def outcome(prompt: int, cached: int | None, ttft: float, late: float | None = None,
            server_ms: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(error=None, prompt_tokens=prompt, cached_tokens=cached, ttft_s=ttft,
                           ttft_late_s=late, server_prefill_ms=server_ms, completion_tokens=1,
                           streamed_tokens=1, e2e_s=ttft)


COLD, BASE = outcome(530, 0, 0.0130), outcome(18, 0, 0.0085)  # on a loaded host


def calibrated(*pairs: tuple[SimpleNamespace, SimpleNamespace]) -> Calibration:
    """Output: a calibration that measured `pairs` (cold twin, base: as `ttft_threshold` keeps
    them)."""
    cal, floor = Calibration(), fastest_base([base for _, base in pairs])
    for cold, base in pairs:
        speed = cold_speed(cold, base, floor)
        if speed is not None:
            cal.cold_prefill_tps.append(speed)
            if not cold.server_prefill_ms:
                cal.fixed_s.append(base.ttft_s)
    return cal


def reread(ttft: float, ref, server_ms: float | None = None) -> bool | None:
    """Output: `ttft_agrees` of a re-read of an 8,183-token context, reported wholly cached."""
    req = SimpleNamespace(id="s/9", expected_cached=8183, prompt_tokens=8183)
    o = outcome(8183, 8183, ttft, server_ms=server_ms)
    return evidence(req, o, None, None, 0.66, ref, 0.0, 0.0)["ttft_agrees"]


def test_the_speed_is_over_what_the_cold_twin_took_beyond_a_few_word_prompt() -> None:
    assert cold_speed(COLD, BASE) == 512 / (0.0130 - 0.0085)  # ~114k tokens/s, not 530 / 13 ms
    # the engine's own prefill time holds no fixed cost: it is used as it is
    assert cold_speed(outcome(530, 0, 0.013, server_ms=5.0), BASE) == 530 / 0.005
    # not drawn from a stamp late by more than 5 % of the difference, nor without the counts
    assert cold_speed(outcome(530, 0, 0.0130, late=0.001), BASE) is None
    assert cold_speed(COLD, outcome(0, None, 0.0085)) is None
    assert cold_speed(outcome(530, 0, 0.008), BASE) is None  # faster than the few words


def test_an_engine_that_recomputes_its_rereads_disagrees_on_a_loaded_host() -> None:
    ref = reference(calibrated((COLD, BASE), (outcome(530, 0, 0.0140), outcome(18, 0, 0.0080))))
    # each cold twin beyond the fastest few-word prompt (8 ms); the dearest allowed for
    assert ref.fixed_s == 0.0085 and round(ref.cold_prefill_tps) == round(512 / 0.0050)
    # a cold prefill of 8,183 tokens is ~80 ms here: a hit must come in under 8.5 + 40 ms
    for recomputed in (0.088, 0.090):
        assert reread(recomputed, ref) is False
    assert reread(0.010, ref) is True  # a true hit
    assert reread(0.040, ref) is True  # a true hit at a moment the host was slower still


def test_the_fixed_cost_is_not_allowed_for_the_engines_own_prefill_time() -> None:
    ref = reference(calibrated((outcome(530, 0, 0.013, server_ms=5.0), BASE)))
    assert ref.fixed_s == 0.0 and ref.cold_prefill_tps == 530 / 0.005
    # 8,183 tokens cost ~77 ms: a "cached" re-read that took 45 ms of the engine's own time
    # recomputed at least half of it
    assert reread(0.050, ref, server_ms=45.0) is False
    assert reread(0.050, ref, server_ms=2.0) is True


def test_a_few_word_prompt_slowed_by_noise_does_not_make_the_engine_look_faster() -> None:
    """Noise only adds time. A few-word prompt slowed by 3.5 ms left its cold twin 1 ms beyond
    it: 512k tokens/s over its own base against ~100k over the fastest. The reference takes the
    fastest pair, so that speed would win: a cold prefill of 8,183 tokens priced at 16 ms, too
    little beside the claimed work for timing to tell, and a recompute not caught."""
    noisy, clean = (COLD, outcome(18, 0, 0.0120)), (outcome(530, 0, 0.0135), BASE)
    assert round(cold_speed(*noisy)) == 512_000
    assert round(cold_speed(*noisy, 0.0085)) == round(512 / 0.0045)
    ref = reference(calibrated(noisy, clean))
    assert round(ref.cold_prefill_tps) == round(512 / 0.0045)
    assert ref.fixed_s == 0.0120  # the dearest few-word TTFT is still allowed for
    assert reread(0.088, ref) is False and reread(0.010, ref) is True
    # a late stamp is no floor: it may hold a wait for more of the stream
    assert fastest_base([outcome(18, 0, 0.002, late=0.001), BASE]) == 0.0085
    assert fastest_base([outcome(0, None, 0.002), BASE]) == 0.0085


def test_the_calibration_takes_each_cold_twin_beyond_its_fastest_few_word_prompt(
        monkeypatch) -> None:
    """Through `ttft_threshold`: pair 0's few-word prompt was slowed by noise, pair 1's was not.
    Both cold speeds are over the fastest few-word TTFT; each pair's own is allowed for."""
    import asyncio

    from workloadlang.plan.realise import RatioSizer
    from workloadlang.run import calibrate
    from workloadlang.run.client import Endpoint, Outcome

    ttft = {"0/base": 0.0120, "0/cold": 0.0130, "1/base": 0.0085, "1/cold": 0.0135}

    async def send(client, endpoint, req):  # noqa: ANN001
        key = "/".join(req.id.split("/")[2:])
        base = key.endswith("/base")
        return Outcome(id=req.id, t_send=0.0, t_send_unix=0.0, e2e_s=0.02,
                       ttft_s=ttft.get(key, 0.003), prompt_tokens=18 if base else 530,
                       cached_tokens=512 if key.endswith("/hit") else 0)

    monkeypatch.setattr(calibrate, "send", send)
    cal = Calibration()
    asyncio.run(calibrate.ttft_threshold(None, Endpoint(base_url="http://x/v1", model="m"),
                                         RatioSizer(1.0), "salt", 512, 2, cal))
    assert [round(s) for s in cal.cold_prefill_tps] == [round(512 / 0.0045), round(512 / 0.005)]
    assert cal.fixed_s == [0.0120, 0.0085]
