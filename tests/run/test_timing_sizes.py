"""When timing can tell a cache hit from a recompute here, and the experiment sized to decide:
a re-read is judged only when a cold prefill of it costs at least 8x the claimed work, counted
as at least what a timing resolves (5 ms of a busy host's noise for the client's TTFT; the
engine's own time of an all-but-cached prefill, from the calibration, when it reports one).
Smaller, its record says the least size that would decide (`decides_at`); `$timing_tokens` is
that size for a re-read, and `wl run` says before sending which re-reads fall short."""

from __future__ import annotations

from workloadlang import api
from workloadlang.run.calibrate import Calibration
from workloadlang.run.record import TtftReference, decisive_prompt, not_judged, ttft_agrees
from workloadlang.run.runner import timing_tokens, too_small_notes

SPEED = 500_000.0  # cold prefill tokens per second: 4k tokens in 8 ms


def test_a_re_read_too_small_for_the_client_s_timing_says_what_size_would_tell() -> None:
    ref = TtftReference(cold_prefill_tps=SPEED)
    # 4k tokens cold: 8 ms, under 8 x 5 ms: cannot tell, and 20k tokens would
    assert ttft_agrees(True, 4000, 20, 0.001, ref) is None
    fields = not_judged(4000, 20, 0.001, ref, server=False)
    assert fields["decides_at"] == decisive_prompt(20, ref) == 20_000
    assert "it can from 20,000" in fields["ttft_agrees_note"]
    assert ttft_agrees(True, 20_000, 20, 0.001, ref) is True
    assert ttft_agrees(True, 20_000, 20, 0.03, ref) is False  # as slow as half a recompute


def test_the_engine_s_own_prefill_time_tells_at_far_smaller_sizes() -> None:
    # the calibration's cached twin took 0.02 ms of the engine's own time: no client noise
    ref = TtftReference(cold_prefill_tps=SPEED, server_floor_s=0.00002)
    assert ttft_agrees(True, 4000, 20, 0.00005, ref, server=True) is True
    assert ttft_agrees(True, 4000, 20, 0.005, ref, server=True) is False
    assert not_judged(100, 20, 0.0, ref, server=True).get("decides_at") is None  # < 256
    assert ttft_agrees(True, 4000, 20, 0.00005, ref, server=False) is None  # the TTFT's floor


def test_timing_tokens_is_the_least_decisive_re_read_within_the_context() -> None:
    client = Calibration(cold_prefill_tps=[SPEED])
    assert timing_tokens(client) == 20_000
    assert timing_tokens(client, max_context=16_384) == 12_288
    engine = Calibration(cold_prefill_tps=[SPEED], hit_prefill_s=[0.00002, 0.00001],
                         cold_prefill_s=[0.004, 0.004])
    assert timing_tokens(engine) == 8 * 64  # the re-read's own few uncached tokens decide
    # its "cached" twins took as long as the cold ones (it recomputed them): no floor of its own
    liar = engine.model_copy(update={"hit_prefill_s": [0.004, 0.004]})
    assert timing_tokens(liar) == 20_000
    assert timing_tokens(Calibration()) == 0


def agent_plan(**env):
    source = api.load("agent-sim")
    return api.make_plan(api.parse_checked(source), source, {
        "sessions": "1", "main_tokens": "4k", "step_tokens": "1k", "sub_tokens": "1k",
        "finalize_tokens": "300"}, salt="sizes", env=env)


def test_agent_sim_pads_its_re_reads_to_timing_tokens_and_says_when_it_cannot() -> None:
    plan = agent_plan()
    rereads = [r for r in plan.requests if r.label == "reread"]
    assert rereads and all(r.prompt_tokens < 5000 for r in rereads)
    cal = Calibration(cold_prefill_tps=[SPEED])
    priced, note = too_small_notes(plan, cal)
    # over the client's TTFT a 300-token finalize and its baselines cannot price a token
    assert priced.startswith("`restore` cannot price a token on this engine: its requests "
                             "timed alone (finalize, baseline) prefill 300 tokens") \
        and "20,000 or more would" in priced
    assert note.startswith("`timing` cannot tell a cache hit from a recompute on this engine: "
                           "its 3 re-read(s) of up to 4,") and "20,000 tokens or more" in note
    padded = agent_plan(timing_tokens=timing_tokens(cal))
    pad = [r for r in padded.requests if r.label == "pad"]
    assert len(pad) == 1 and pad[0].isolated and pad[0].new_tokens == 16_000
    assert all(r.prompt_tokens >= 20_000 for r in padded.requests if r.label == "reread")
    assert [n for n in too_small_notes(padded, cal) if n.startswith("`timing`")] == []
