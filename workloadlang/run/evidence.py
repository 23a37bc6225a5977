"""Normalising the per-request cache evidence engines report (pure functions, no I/O).

A "document" below is one decoded JSON object from an engine: a streamed chunk, a final response
body, a Responses-API event or an Anthropic event. Engines put the numbers in different places
(see docs engines.md §0, §5 and §6.3); these functions read all of them:

* `find_cached(doc)` -> `(value, source)`: the first present numeric cached-token field, in the
  precedence order of engines.md §6.3, or `(None, "none")`.
* `merge_cached(current, found)`: keep the better of two readings; a later reading never resets
  a known value to unknown.
* `resolve_cached(value, source, usage_seen, zero_when_absent)`: the final value, applying the
  user's declaration that the engine drops the field when it is 0 (`declared_zero`). Unknown stays
  `None` (source `none`): never a silent 0.
* `prompt_total(doc)`, `completion_total(doc)`, `usage_of(doc)`, `server_times(doc)`.
* `suspicious_flags(...)`: sanity checks on the numbers (engines.md §6.4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NONE = "none"
DECLARED_ZERO = "declared_zero"

# (source name, where it lives). "usage." paths are read from `usage_of(doc)`, the rest from the
# document itself. Order = precedence (engines.md §6.3); prompt_progress.cache (llama.cpp's early
# prefill progress, `return_progress: true`) is a last resort that survives a cut stream.
CACHED_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("usage.prompt_tokens_details.cached_tokens", ("prompt_tokens_details", "cached_tokens")),
    ("usage.input_tokens_details.cached_tokens", ("input_tokens_details", "cached_tokens")),
    ("usage.cache_read_input_tokens", ("cache_read_input_tokens",)),
    ("usage.prompt_cache_hit_tokens", ("prompt_cache_hit_tokens",)),
    ("timings.cache_n", ("timings", "cache_n")),
    ("meta_info.cached_tokens", ("meta_info", "cached_tokens")),
    ("prompt_eval_cached_count", ("prompt_eval_cached_count",)),
    ("prompt_progress.cache", ("prompt_progress", "cache")),
)
_RANK = {name: i for i, (name, _) in enumerate(CACHED_SOURCES)}
_RANK[DECLARED_ZERO] = len(CACHED_SOURCES)
_RANK[NONE] = len(CACHED_SOURCES) + 1


def as_count(value: Any) -> int | None:
    """Input: any JSON value. Output: it as an int token count when it is a finite number
    (not a bool), else None."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return int(value)
    return None


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    """Input: nested dicts and a key path. Output: the value there, or None."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def usage_of(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Input: a document. Output: its usage object: `usage`, or `response.usage` (Responses API
    stream events), or `message.usage` (Anthropic `message_start`); None when there is none."""
    for path in (("usage",), ("response", "usage"), ("message", "usage")):
        usage = _dig(doc, path)
        if isinstance(usage, Mapping):
            return usage
    return None


def find_cached(doc: Mapping[str, Any]) -> tuple[int | None, str]:
    """Input: a document. Output: `(cached_tokens, source)` from the first present numeric field
    in precedence order, or `(None, "none")`."""
    usage = usage_of(doc)
    for name, path in CACHED_SOURCES:
        base = usage if name.startswith("usage.") else doc
        value = as_count(_dig(base, path))
        if value is not None:
            return value, name
    return None, NONE


def cached_rank(source: str) -> int:
    """Input: a source name. Output: its precedence (lower is better; unknown names rank last)."""
    return _RANK.get(source, _RANK[NONE])


def merge_cached(current: tuple[int | None, str], found: tuple[int | None, str]) -> tuple[int | None, str]:
    """Input: the reading so far and a new one, each `(value, source)`. Output: the new reading when
    it has a value from a source at least as good (a later usage chunk updates the same field),
    else the current one. A `None` never replaces a known value."""
    if found[0] is None:
        return current
    if current[0] is None or cached_rank(found[1]) <= cached_rank(current[1]):
        return found
    return current


def resolve_cached(
    value: int | None, source: str, usage_seen: bool, zero_when_absent: bool
) -> tuple[int | None, str]:
    """Input: the best reading, whether any usage object arrived, and the user's declaration that
    the engine leaves the field out when it is 0 (vLLM `--enable-prompt-tokens-details`, SGLang
    `--enable-cache-report`). Output: the final `(value, source)`: the reading when known;
    `(0, "declared_zero")` when usage arrived without the field and the user declared it; else
    `(None, "none")` — unknown, never a silent 0."""
    if value is not None:
        return value, source
    if usage_seen and zero_when_absent:
        return 0, DECLARED_ZERO
    return None, NONE


def prompt_total(doc: Mapping[str, Any]) -> int | None:
    """Input: a document. Output: the whole prompt length in tokens, or None.

    `usage.prompt_tokens` (OpenAI chat, vLLM, SGLang, llama.cpp, DeepSeek); Responses-API
    `usage.input_tokens`; Anthropic input + cache_read + cache_creation (its `input_tokens`
    excludes the cached part); Ollama `prompt_eval_count`; SGLang native `meta_info.prompt_tokens`.
    """
    usage = usage_of(doc)
    if usage is not None:
        value = as_count(usage.get("prompt_tokens"))
        if value is not None:
            return value
        value = as_count(usage.get("input_tokens"))
        if value is not None:
            if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
                value += as_count(usage.get("cache_read_input_tokens")) or 0
                value += as_count(usage.get("cache_creation_input_tokens")) or 0
            return value
    value = as_count(doc.get("prompt_eval_count"))
    if value is not None:
        return value
    return as_count(_dig(doc, ("meta_info", "prompt_tokens")))


def completion_total(doc: Mapping[str, Any]) -> int | None:
    """Input: a document. Output: generated tokens (`usage.completion_tokens`, `output_tokens`,
    Ollama `eval_count`, SGLang native `meta_info.completion_tokens`), or None."""
    usage = usage_of(doc)
    if usage is not None:
        for key in ("completion_tokens", "output_tokens"):
            value = as_count(usage.get(key))
            if value is not None:
                return value
    value = as_count(doc.get("eval_count"))
    if value is not None:
        return value
    return as_count(_dig(doc, ("meta_info", "completion_tokens")))


def _ms(value: Any, scale: float = 1.0) -> float | None:
    """Input: a JSON number and a unit scale. Output: milliseconds as float, or None."""
    if type(value) in (int, float) and math.isfinite(value):
        return float(value) * scale
    return None


def server_times(doc: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """Input: a document. Output: `(server_prefill_ms, server_ttft_ms)`.

    llama.cpp: `timings.prompt_ms` (prefill, excluding queueing) and `timings.ttft_ms` when the
    build reports it. Ollama native (nanoseconds): `prompt_eval_duration` and
    `load_duration + prompt_eval_duration`."""
    timings = doc.get("timings")
    if isinstance(timings, Mapping):
        return _ms(timings.get("prompt_ms")), _ms(timings.get("ttft_ms"))
    prefill = _ms(doc.get("prompt_eval_duration"), 1e-6)
    if prefill is None:
        return None, None
    load = _ms(doc.get("load_duration"), 1e-6) or 0.0
    return prefill, prefill + load


def suspicious_flags(
    prompt_tokens: int | None,
    cached_tokens: int | None,
    cached_source: str,
    timings: Mapping[str, Any] | None,
) -> list[str]:
    """Input: a request's prompt and cached counts, the cached source and raw llama.cpp timings.
    Output: human-readable findings that the numbers do not add up (empty when they do)."""
    flags: list[str] = []
    if cached_tokens is not None and cached_tokens < 0:
        flags.append(f"cached_tokens is negative ({cached_tokens})")
    if cached_tokens is not None and prompt_tokens is not None:
        if cached_tokens > prompt_tokens:
            flags.append(f"cached_tokens > prompt_tokens ({cached_tokens} > {prompt_tokens})")
        elif cached_tokens == prompt_tokens and prompt_tokens > 0:
            flags.append(
                f"cached_tokens == prompt_tokens ({cached_tokens}); engines recompute at least one token"
            )
    if isinstance(timings, Mapping):
        flags.extend(_timing_flags(prompt_tokens, cached_tokens, cached_source, timings))
    return flags


def _timing_flags(
    prompt_tokens: int | None, cached_tokens: int | None, cached_source: str, timings: Mapping[str, Any]
) -> list[str]:
    """Input: counts plus llama.cpp timings. Output: findings where they disagree."""
    flags: list[str] = []
    prompt_n = as_count(timings.get("prompt_n"))
    cache_n = as_count(timings.get("cache_n"))
    if prompt_n is not None and cache_n is not None and prompt_tokens is not None:
        if prompt_n + cache_n != prompt_tokens:
            flags.append(
                f"timings.prompt_n + timings.cache_n = {prompt_n + cache_n} != prompt_tokens {prompt_tokens}"
            )
    if cache_n is not None and cached_tokens is not None and cached_source != "timings.cache_n":
        if cache_n != cached_tokens:
            flags.append(f"{cached_source} = {cached_tokens} != timings.cache_n = {cache_n}")
    return flags
