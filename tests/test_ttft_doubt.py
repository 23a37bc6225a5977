"""Verdicts never drawn from a first-token stamp that may be late: a TTFT flagged `ttft_late_s`
(the first token came in a read of several packets, under the newest one's stamp) only decides
a TTFT-based verdict when every value it may really have had decides the same."""

from __future__ import annotations

from types import SimpleNamespace

from workloadlang.run.record import TtftReference, evidence

REF = TtftReference(threshold_s=0.1, threshold_tokens=2000, cold_prefill_tps=10_000.0)


def warm_step(**outcome: object) -> dict:
    """Output: the evidence of a warm step (2,000-token prompt, 1,900 expected from cache)."""
    req = SimpleNamespace(id="s/1", expected_cached=1900, prompt_tokens=2000)
    o = dict(prompt_tokens=2000, cached_tokens=1900, ttft_s=0.12, ttft_late_s=None,
             server_prefill_ms=None, completion_tokens=4, streamed_tokens=4, e2e_s=0.2)
    o.update(outcome)
    return evidence(req, SimpleNamespace(**o), None, None, 0.9, REF)


def test_a_reported_hit_timed_like_a_recompute_disagrees_unless_the_stamp_may_be_late() -> None:
    # a cold prefill of 2,000 tokens takes 0.2 s here: a hit must come in under 0.1 s
    assert warm_step()["ttft_agrees"] is False
    assert warm_step(ttft_late_s=0.05)["ttft_agrees"] is None  # really 0.07-0.12 s: cannot tell
    assert warm_step(ttft_late_s=0.01)["ttft_agrees"] is False  # really 0.11-0.12 s: too slow
    assert warm_step(ttft_s=0.05, ttft_late_s=0.04)["ttft_agrees"] is True


def test_the_engines_own_prefill_time_is_not_doubted() -> None:
    out = warm_step(server_prefill_ms=120.0, ttft_late_s=0.05)
    assert out["prefill_source"] == "server" and out["ttft_agrees"] is False


def test_a_hit_judged_by_ttft_alone_is_unknown_when_the_stamp_may_be_late_across_the_threshold() -> None:
    assert warm_step(cached_tokens=None)["hit"] is False
    late = warm_step(cached_tokens=None, ttft_late_s=0.05)
    assert late["hit"] is None and late["hit_basis"] is None
    assert warm_step(cached_tokens=None, ttft_late_s=0.01)["hit"] is False
    assert warm_step(cached_tokens=None, ttft_s=0.08, ttft_late_s=0.05)["hit"] is True
