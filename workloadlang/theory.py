"""The measured prefix-cache hit rate next to what the plan says a cache should serve.

Input: the plan (its concurrency and LRU cache model) and the run's records. Output: the
results' `cache_theory` (a dict, JSON-ready) and the line `wl run` prints from it.

All three rates are token-weighted and over the same requests: those answered with a cached
count (an errored, skipped or silent request says nothing about the cache). Measured: the cached
tokens the engine reported over the prompt tokens it counted. Perfect cache (`unlimited`): the
plan's `expected_cached` over its planned prompt tokens; `lru`: its `lru_cached` (with
`--cache-tokens`). The theory takes requests one at a time in the plan's order; at a concurrency
above 1 requests overlap and the difference from the measured rate is reported, not hidden.

No cache can serve a request more than its prompt shares with requests sent before it: the
`upper_cached_tokens` are, per request, the most any order of the run's requests allows (the
plan's `exp. max`, the runner's expectation from the engine's counts), in the engine's tokens.
Measured well above them (`served_before_run_tokens`), the engine held this run's text before
it started: an earlier run with the same salt, or another client sending the same text.
"""

from __future__ import annotations

from typing import Any, Sequence

from workloadlang.plan.model import Plan


def measured(r: Any) -> bool:
    return (r.error is None and not r.skipped and r.cached_source != "none"
            and r.cached_tokens is not None and r.prompt_tokens)


ABOVE_SLACK_TOKENS = 64
ABOVE_SLACK_RATIO = 0.02
"""Cached tokens above `upper_cached_tokens` within this much (of the prompt tokens, at least
the tokens) are taken for the engine's own counting (its tokenizer, its chat template)."""


def upper_bound(planned: dict[str, Any], r: Any) -> int:
    """Input: the plan's requests by id and a measured record. Output: the most cached tokens
    any order of the run's requests could give it, in the engine's tokens: the plan's `exp.
    max` scaled to the engine's prompt, or the runner's expectation from the engine's counts
    when that is more."""
    req = planned.get(r.id)
    most = r.planned_expected_cached
    if req is not None and req.expected_cached_max is not None:
        most = max(most, req.expected_cached_max)
    scaled = round(most * r.prompt_tokens / max(1, r.planned_prompt_tokens))
    return max(scaled, r.expected_cached or 0)


def cache_theory(plan: Plan, records: Sequence[Any]) -> dict[str, Any]:
    """Output: the measured and the planned hit rates over the requests with a cached count,
    and what was served above what this run's requests allow."""
    rs = [r for r in records if measured(r)]
    prompt = sum(r.prompt_tokens for r in rs)
    planned = sum(r.planned_prompt_tokens for r in rs)
    model = plan.cache_model
    out: dict[str, Any] = {
        "requests": len(rs), "concurrency": plan.concurrency,
        "cache_tokens": model.tokens if model else None,
        "cache_block": model.block if model else None,
        "prompt_tokens": prompt, "cached_tokens": sum(r.cached_tokens for r in rs),
        "planned_prompt_tokens": planned,
        "expected_cached_tokens": sum(r.planned_expected_cached for r in rs),
        "lru_cached_tokens": sum(r.planned_lru_cached or 0 for r in rs) if model else None,
    }
    planned_by_id = plan.by_id()
    upper = sum(upper_bound(planned_by_id, r) for r in rs)
    above = out["cached_tokens"] - upper
    out["upper_cached_tokens"] = upper
    out["served_before_run_tokens"] = above if above > max(
        ABOVE_SLACK_TOKENS, ABOVE_SLACK_RATIO * prompt) else 0
    out["measured"] = out["cached_tokens"] / prompt if prompt else None
    out["unlimited"] = out["expected_cached_tokens"] / planned if planned else None
    out["lru"] = (out["lru_cached_tokens"] / planned
                  if model and planned else None)
    return out


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def theory_line(theory: dict[str, Any] | None) -> str | None:
    """The line `wl run` prints: the measured rate, the perfect and LRU caches' rates, and
    how far the measured one is from the LRU figure."""
    if not theory or not theory.get("requests"):
        return None
    line = (f"cache hit rate over {theory['requests']:,} request(s): measured "
            f"{pct(theory['measured'])} of prompt tokens; a perfect cache "
            f"{pct(theory['unlimited'])}")
    if theory.get("lru") is not None:
        gap = 100 * (theory["measured"] - theory["lru"])
        line += (f", an LRU cache of {theory['cache_tokens']:,} tokens (blocks of "
                 f"{theory['cache_block']:,}) {pct(theory['lru'])} (measured {gap:+.1f} points)")
    if theory.get("concurrency", 1) > 1:
        line += (f"; at concurrency {theory['concurrency']} requests overlap, the theory takes "
                 "them one at a time")
    if theory.get("served_before_run_tokens"):
        line += (f"\nNOTE: the engine served {theory['served_before_run_tokens']:,} cached "
                 "tokens more than any order of this run's requests allows "
                 f"({theory['upper_cached_tokens']:,}): it held this run's text before the run started (an earlier run with the same "
                 "salt, or another client sending the same text)")
    return line
