"""Prefix-cache counters from an engine's Prometheus `/metrics`, for a run-level cross-check.

`scrape(client, metrics_url, api_key)` -> `PrefixCounters | None` (None when the endpoint is
unreachable, errors, does not parse, or exposes no known counter pair; `read` also says which).
Counters are summed over all label sets. Families, in the order tried:

* `vllm`: `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`;
* `vllm-gpu`: the older `vllm:gpu_prefix_cache_queries_total` / `..._hits_total`;
* `sglang`: `sglang:prompt_tokens_total` (queries) / `sglang:cached_tokens_total` (hits);
* `llamacpp`: `llamacpp:prompt_tokens_total` counts processed tokens only (cached excluded), so
  queries = processed + `llamacpp:prompt_tokens_cached_total`;
* `ninfer`: `ninfer_prefix_cache_query_tokens_total` / `ninfer_prefix_cache_hit_tokens_total`.

prometheus_client's parser strips `_total` from counter *family* names but not from sample names,
and a family without a TYPE line keeps it; names are therefore compared with `_total` removed.
`delta(before, after)` -> `(hits, queries, ratio | None)` over a run.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, SecretStr

from workloadlang.run.endpoint import auth_headers, root_of
from workloadlang.run.side import AnswerTooLarge, Side, SideError, call_again_if_dropped, side_of

# family -> (queries metric, hits metric, queries also add the hits)
FAMILIES: tuple[tuple[str, str, str, bool], ...] = (
    ("vllm", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", False),
    ("vllm-gpu", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits", False),
    ("sglang", "sglang:prompt_tokens", "sglang:cached_tokens", False),
    ("llamacpp", "llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached", True),
    ("ninfer", "ninfer_prefix_cache_query_tokens", "ninfer_prefix_cache_hit_tokens", False),
)


class PrefixCounters(BaseModel):
    """Cumulative prompt tokens the engine looked up in its prefix cache (`queries_tokens`) and
    found there (`hits_tokens`), and which counter `family` they came from."""

    model_config = ConfigDict(frozen=True)

    queries_tokens: int
    hits_tokens: int
    family: str


def _base(name: str) -> str:
    """Output: a metric name without a trailing `_total`."""
    return name[: -len("_total")] if name.endswith("_total") else name


def sum_samples(text: str) -> dict[str, float]:
    """Input: Prometheus exposition text. Output: `{name without _total: sum over label sets}` for
    every sample not named `*_created`. Raises ValueError when the text does not parse."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            key = _base(sample.name)
            sums[key] = sums.get(key, 0.0) + float(sample.value)
    return sums


def counters_from_sums(sums: dict[str, float], families: Iterable[tuple[str, str, str, bool]] = FAMILIES) -> PrefixCounters | None:
    """Input: summed samples. Output: the first family whose two counters are both present."""
    for family, queries_name, hits_name, add_hits in families:
        if queries_name in sums and hits_name in sums:
            hits = int(round(sums[hits_name]))
            queries = int(round(sums[queries_name])) + (hits if add_hits else 0)
            return PrefixCounters(queries_tokens=queries, hits_tokens=hits, family=family)
    return None


def parse_counters(text: str) -> PrefixCounters | None:
    """Input: exposition text. Output: the prefix counters, or None (unknown names or bad text)."""
    try:
        sums = sum_samples(text)
    except (ValueError, IndexError, TypeError):
        return None
    return counters_from_sums(sums)


def metrics_url_for(base_url: str) -> str:
    """Input: the OpenAI base URL. Output: `{root}/metrics`, removing only a trailing `/v1`."""
    return root_of(base_url) + "/metrics"


async def scrape(
    client: Side | httpx.AsyncClient, metrics_url: str, api_key: SecretStr | str | None = None,
    timeout: float = 10.0,
) -> PrefixCounters | None:
    """Input: a side client (or an httpx client), the metrics URL, optional key (sent as
    bearer auth). Output: the
    current counters, or None when they cannot be read (`read` says why). Never raises for HTTP
    problems."""
    return (await read(client, metrics_url, api_key, timeout))[0]


async def read(
    client: Side | httpx.AsyncClient, metrics_url: str, api_key: SecretStr | str | None = None,
    timeout: float = 10.0,
) -> tuple[PrefixCounters | None, str | None]:
    """See `scrape`. Output: `(counters, None)`, or `(None, why not)` — unreachable, an HTTP
    error status, or no known counter pair in the text. A pooled connection the server had
    closed (keep-alive: llama-server after a run's last answer) gets one retry on a fresh one."""
    headers = auth_headers(api_key)
    try:
        status, body = await call_again_if_dropped(side_of(client), "GET", metrics_url,
                                                   headers, None, timeout)
    except SideError as exc:
        return None, f"GET {metrics_url}: {exc.name}"
    except AnswerTooLarge as exc:
        return None, f"GET {metrics_url}: {exc}"
    text = body.decode("utf-8", errors="replace")
    if status >= 400:
        return None, f"GET {metrics_url}: HTTP {status}"
    counters = parse_counters(text)
    if counters is None:
        return None, f"GET {metrics_url}: no prefix-cache counters this tool knows"
    return counters, None


def delta(before: PrefixCounters, after: PrefixCounters) -> tuple[int, int, float | None]:
    """Input: counters read before and after a run. Output: `(hits, queries, hits / queries)`;
    the ratio is None when nothing was queried, when a counter went backwards (engine restart) or
    when the two readings come from different families."""
    hits = after.hits_tokens - before.hits_tokens
    queries = after.queries_tokens - before.queries_tokens
    if before.family != after.family or hits < 0 or queries <= 0:
        return hits, queries, None
    return hits, queries, hits / queries
