"""The measured prefix-cache hit rate next to what the plan says a cache should serve.

Input: the plan (its concurrency and LRU cache model) and the run's records. Output: the
results' `cache_theory` (a dict, JSON-ready) and the line `wl run` prints from it.

The rates are token-weighted and over the same requests: those answered with a cached count
(an errored, skipped or silent request says nothing about the cache). Measured: the cached
tokens the engine reported over the prompt tokens it counted. A perfect cache's range, over the
same prompt tokens: what it certainly serves (`certain`: per request what requests certainly
finished before it leave, the runner's expectation from the engine's counts) and what it could
serve at most (`possible`: `upper_cached_tokens`, below); `range` says where the measured rate
falls (`below` what is certain by more than the engine's blocks, `within`, `above` what any
order allows). The plan's own figures, over its planned prompt tokens: `unlimited` (its `exp.
cached`), `unlimited_max` (with each request's `exp. max`), `lru` (its `lru_cached`, with
`--cache-tokens`). The theory takes requests one at a time in the plan's order; with several
requests in flight at once (`in_flight`: the concurrency limit, or fewer when the sessions,
their forks and caps cannot fill it) they overlap, and the difference from the measured rate is
reported, not hidden.

No cache can serve a request more than its prompt shares with requests sent before it: the
`upper_cached_tokens` are, per request, the most any order of the run's requests allows (the
plan's `exp. max`, the runner's expectation from the engine's counts), in the engine's tokens.
Measured well above them (`served_before_run_tokens`), the engine held this run's text before
it started: an earlier run with the same salt, or another client sending the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workloadlang.plan import lanes
from workloadlang.plan.model import Plan
from workloadlang.resultsmodels import CacheTheory


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


def cache_theory(plan: Plan, records: Sequence[Any]) -> CacheTheory:
    """Output: the measured and the planned hit rates over the requests with a cached count,
    and what was served above what this run's requests allow."""
    rs = [r for r in records if measured(r)]
    prompt = sum(r.prompt_tokens for r in rs)
    planned = sum(r.planned_prompt_tokens for r in rs)
    cached = sum(r.cached_tokens for r in rs)
    expected = sum(r.planned_expected_cached for r in rs)
    most = sum(possible(r) for r in rs)
    model = plan.cache_model
    lru_tokens = sum(r.planned_lru_cached or 0 for r in rs) if model else None
    planned_by_id = plan.by_id()
    upper = sum(upper_bound(planned_by_id, r) for r in rs)
    above = cached - upper
    before = above if above > max(ABOVE_SLACK_TOKENS, ABOVE_SLACK_RATIO * prompt) else 0
    certain_tokens = sum(certain(r) for r in rs)
    share = lambda x: x / prompt if prompt else None  # noqa: E731
    of_plan = lambda x: x / planned if planned else None  # noqa: E731
    return CacheTheory(
        requests=len(rs), concurrency=plan.concurrency, traced=bool(plan.traces),
        in_flight=min(plan.concurrency, lanes.in_flight(plan.requests,
                                                        lanes.caps_of(plan.sessions))),
        cache_tokens=model.tokens if model else None,
        cache_block=model.block if model else None,
        prompt_tokens=prompt, cached_tokens=cached, planned_prompt_tokens=planned,
        expected_cached_tokens=expected, expected_cached_max_tokens=most,
        lru_cached_tokens=lru_tokens, upper_cached_tokens=upper,
        served_before_run_tokens=before, measured=share(cached), unlimited=of_plan(expected),
        unlimited_max=of_plan(most), certain_cached_tokens=certain_tokens,
        certain=share(certain_tokens), possible=share(upper),
        range=where(cached, certain_tokens, len(rs), prompt, bool(before)),
        lru=lru_tokens / planned if model and planned and lru_tokens is not None else None)


def possible(r: Any) -> int:
    """Input: a record. Output: the most a perfect cache could serve it in the plan's tokens:
    its `exp. max` when it has one, else its `exp. cached`."""
    most = r.planned_expected_max
    return r.planned_expected_cached if most is None else max(most, r.planned_expected_cached)


BLOCK_SLACK_TOKENS = 32
"""Cached tokens a request may fall short of what is certain by, an engine caching whole
blocks (16 tokens in vLLM and the simulator) and counting with its own template."""


def certain(r: Any) -> int:
    """Input: a measured record. Output: what a perfect cache certainly serves it in the
    engine's tokens: the runner's expectation from the engine's counts of its prefix source,
    else the plan's `exp. cached` scaled to the engine's prompt."""
    if r.expected_cached is not None:
        return r.expected_cached
    return round(r.planned_expected_cached * r.prompt_tokens / max(1, r.planned_prompt_tokens))


def where(cached: int, certain_tokens: int, requests: int, prompt: int,
          above: bool) -> str | None:
    """Input: the cached tokens measured, what a perfect cache certainly serves the same
    requests (in the engine's tokens), how many requests, their prompt tokens, whether the
    engine served more than any order allows (`served_before_run_tokens`). Output: where the
    measured share falls in the perfect cache's range: `above` it, `below` what is certain by
    more than a block a request and half a percent, else `within` (None: no request)."""
    if not requests:
        return None
    if above:
        return "above"
    slack = BLOCK_SLACK_TOKENS * requests + 0.005 * prompt
    return "below" if cached < certain_tokens - slack else "within"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def theory_line(theory: CacheTheory | None) -> str | None:
    """The line `wl run` prints: the measured rate next to the perfect cache's range (certain
    to possible) and where it falls, the LRU cache's rate and how far the measured one is from
    it, and when requests overlapped."""
    if theory is None or not theory.requests:
        return None
    line = (f"cache hit rate over {theory.requests:,} request(s), of prompt tokens: measured "
            f"{pct(theory.measured)}; {perfect_range(theory)}")
    if theory.lru is not None:
        gap = 100 * ((theory.measured or 0.0) - theory.lru)
        line += (f"; an LRU cache of {theory.cache_tokens or 0:,} tokens (blocks of "
                 f"{theory.cache_block or 0:,}) {pct(theory.lru)} (measured {gap:+.1f} points)")
    in_flight = theory.overlap
    if in_flight > 1:
        line += (f"; up to {in_flight} requests in flight at once, the theory takes them one at "
                 "a time")
    if theory.served_before_run_tokens:
        line += (f"\nNOTE: the engine served {theory.served_before_run_tokens:,} cached "
                 "tokens more than any order of this run's requests allows "
                 f"({theory.upper_cached_tokens or 0:,}): it held this run's text before the run "
                 "started (an earlier run with the same salt, or another client sending the same "
                 "text)")
    return line


def perfect_range(theory: CacheTheory) -> str:
    """A perfect cache's share as its range, side by side, and where the measured rate falls:
    `a perfect cache: certain 65.3%, possible 97.5% (measured within the range)`."""
    low, high = theory.certain, theory.possible
    text = f"a perfect cache: certain {pct(low)}, possible {pct(low if high is None else high)}"
    verdict = theory.range
    if verdict == "below":
        return text + " (measured below the certain share: the engine kept less)"
    if verdict == "above":
        return text + " (measured above the possible share: see the NOTE)"
    return text + (" (measured within the range)" if verdict == "within" else "")
