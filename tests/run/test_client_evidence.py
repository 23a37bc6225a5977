"""The cached-token evidence table (workloadlang.run.evidence): one test per engine shape from
engines.md, plus precedence, merge and the never-a-silent-zero rule."""

from __future__ import annotations

import pytest

from workloadlang.run import evidence as ev

LLAMACPP_USAGE_CHUNK = {
    "choices": [],
    "usage": {"prompt_tokens": 3000, "completion_tokens": 1, "total_tokens": 3001,
              "prompt_tokens_details": {"cached_tokens": 2999}},
    "timings": {"cache_n": 2999, "prompt_n": 1, "prompt_ms": 18.2, "predicted_n": 1},
}
VLLM_WITH_FIELD = {"choices": [], "usage": {"prompt_tokens": 1040, "completion_tokens": 8,
                                            "prompt_tokens_details": {"cached_tokens": 1024}}}
VLLM_WITHOUT_FIELD = {"choices": [], "usage": {"prompt_tokens": 1040, "completion_tokens": 8}}
SGLANG_OPENAI = {"choices": [], "usage": {"prompt_tokens": 500, "completion_tokens": 2,
                                          "prompt_tokens_details": {"cached_tokens": 499}}}
SGLANG_NATIVE = {"text": "x", "meta_info": {"prompt_tokens": 500, "completion_tokens": 2, "cached_tokens": 256}}
OPENAI_RESPONSES = {"type": "response.completed", "response": {"usage": {
    "input_tokens": 2048, "output_tokens": 10, "input_tokens_details": {"cached_tokens": 1920}}}}
ANTHROPIC = {"type": "message_start", "message": {"usage": {
    "input_tokens": 20, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 80, "output_tokens": 1}}}
DEEPSEEK = {"choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 5,
                                     "prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 260}}
OLLAMA_NEW = {"done": True, "prompt_eval_count": 300, "prompt_eval_cached_count": 280, "eval_count": 4,
              "prompt_eval_duration": 2_000_000, "load_duration": 500_000}
OLLAMA_OLD = {"done": True, "prompt_eval_count": 300, "eval_count": 4}
NINFER_OLD = {"choices": [], "usage": {"prompt_tokens": 64, "completion_tokens": 2, "total_tokens": 66}}


@pytest.mark.parametrize(
    ("doc", "cached", "source", "prompt", "completion"),
    [
        (LLAMACPP_USAGE_CHUNK, 2999, "usage.prompt_tokens_details.cached_tokens", 3000, 1),
        (VLLM_WITH_FIELD, 1024, "usage.prompt_tokens_details.cached_tokens", 1040, 8),
        (VLLM_WITHOUT_FIELD, None, "none", 1040, 8),
        (SGLANG_OPENAI, 499, "usage.prompt_tokens_details.cached_tokens", 500, 2),
        (SGLANG_NATIVE, 256, "meta_info.cached_tokens", 500, 2),
        (OPENAI_RESPONSES, 1920, "usage.input_tokens_details.cached_tokens", 2048, 10),
        (ANTHROPIC, 1000, "usage.cache_read_input_tokens", 1100, 1),
        (DEEPSEEK, 640, "usage.prompt_cache_hit_tokens", 900, 5),
        (OLLAMA_NEW, 280, "prompt_eval_cached_count", 300, 4),
        (OLLAMA_OLD, None, "none", 300, 4),
        (NINFER_OLD, None, "none", 64, 2),
    ],
)
def test_engine_shapes(doc: dict, cached: int | None, source: str, prompt: int, completion: int) -> None:
    assert ev.find_cached(doc) == (cached, source)
    assert ev.prompt_total(doc) == prompt
    assert ev.completion_total(doc) == completion


def test_llamacpp_timings_alone() -> None:
    doc = {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": {"cache_n": 12, "prompt_n": 4}}
    assert ev.find_cached(doc) == (12, "timings.cache_n")


def test_usage_field_beats_timings_and_zero_is_a_value() -> None:
    doc = {"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}, "timings": {"cache_n": 5}}
    assert ev.find_cached(doc) == (0, "usage.prompt_tokens_details.cached_tokens")


def test_non_numeric_values_are_skipped() -> None:
    doc = {"usage": {"prompt_tokens_details": {"cached_tokens": None}, "cache_read_input_tokens": True},
           "timings": {"cache_n": "7"}, "meta_info": {"cached_tokens": 3.0}}
    assert ev.find_cached(doc) == (3, "meta_info.cached_tokens")
    assert ev.find_cached({"usage": None}) == (None, "none")


def test_merge_keeps_known_values_and_precedence() -> None:
    usage = (8, "usage.prompt_tokens_details.cached_tokens")
    timings = (9, "timings.cache_n")
    assert ev.merge_cached(usage, (None, "none")) == usage
    assert ev.merge_cached(usage, timings) == usage
    assert ev.merge_cached(timings, usage) == usage
    assert ev.merge_cached((None, "none"), timings) == timings
    later = (10, "usage.prompt_tokens_details.cached_tokens")
    assert ev.merge_cached(usage, later) == later


def test_resolve_never_a_silent_zero() -> None:
    assert ev.resolve_cached(None, "none", usage_seen=True, zero_when_absent=False) == (None, "none")
    assert ev.resolve_cached(None, "none", usage_seen=False, zero_when_absent=True) == (None, "none")
    assert ev.resolve_cached(None, "none", usage_seen=True, zero_when_absent=True) == (0, "declared_zero")
    assert ev.resolve_cached(5, "timings.cache_n", usage_seen=True, zero_when_absent=True) == (5, "timings.cache_n")


def test_server_times() -> None:
    assert ev.server_times(LLAMACPP_USAGE_CHUNK) == (18.2, None)
    assert ev.server_times({"timings": {"prompt_ms": 3, "ttft_ms": 4.5}}) == (3.0, 4.5)
    assert ev.server_times(OLLAMA_NEW) == pytest.approx((2.0, 2.5))
    assert ev.server_times(VLLM_WITH_FIELD) == (None, None)


def test_suspicious_flags() -> None:
    assert ev.suspicious_flags(3000, 2999, "usage.prompt_tokens_details.cached_tokens",
                               LLAMACPP_USAGE_CHUNK["timings"]) == []
    assert ev.suspicious_flags(100, 100, "x", None) == [
        "cached_tokens == prompt_tokens (100); engines recompute at least one token"]
    assert ev.suspicious_flags(100, 120, "x", None) == ["cached_tokens > prompt_tokens (120 > 100)"]
    assert ev.suspicious_flags(0, 0, "declared_zero", None) == []
    flags = ev.suspicious_flags(100, 60, "usage.prompt_tokens_details.cached_tokens", {"cache_n": 50, "prompt_n": 30})
    assert "timings.prompt_n + timings.cache_n = 80 != prompt_tokens 100" in flags
    assert "usage.prompt_tokens_details.cached_tokens = 60 != timings.cache_n = 50" in flags
    assert ev.suspicious_flags(None, None, "none", None) == []
