"""The measured prefix-cache hit rate next to what the plan says a cache should serve.

Input: the plan (its concurrency and LRU cache model) and the run's records. Output: the
results' `cache_theory` (a dict, JSON-ready) and the line `wl run` prints from it.

All three rates are token-weighted and over the same requests: those answered with a cached
count (an errored, skipped or silent request says nothing about the cache). Measured: the cached
tokens the engine reported over the prompt tokens it counted. Perfect cache (`unlimited`): the
plan's `expected_cached` over its planned prompt tokens; `lru`: its `lru_cached` (with
`--cache-tokens`). The theory takes requests one at a time in the plan's order; at a concurrency
above 1 requests overlap and the difference from the measured rate is reported, not hidden.
"""

from __future__ import annotations

from typing import Any, Sequence

from workloadlang.plan.model import Plan


def measured(r: Any) -> bool:
    return (r.error is None and not r.skipped and r.cached_source != "none"
            and r.cached_tokens is not None and r.prompt_tokens)


def cache_theory(plan: Plan, records: Sequence[Any]) -> dict[str, Any]:
    """Output: the measured and the planned hit rates over the requests with a cached count."""
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
    return line
