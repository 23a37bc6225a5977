"""Granularity: the unit the cache matches in, from `probes/granularity`.

Input: the lab. Output: `Grain` (the block size, what every prompt shares with the one before
it, the template's tokens around a prompt's text, the cold prefill's price) and the card's
`granularity` property.

Prompts of chosen sizes are sent cold, then again: the second send is served up to the cache's
unit below the whole prompt, so the served counts are multiples of the block size and their
greatest common divisor is it (the sizes are chosen so that the multiples they give have no
common factor). A cache that serves all but the last token of every prompt matches tokens.
Two prompts that share a prefix and then differ tell whether a prefix different prompts share
is served, or only whole prompts.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass, field

from workloadlang.card import Property
from workloadlang.probe.hypotheses import Prompt
from workloadlang.probe.lab import Lab
from workloadlang.results import Record

SIZES = (128, 141, 154, 167, 180, 193, 206, 219, 780, 1100)
"""Close sizes (their served blocks include two consecutive multiples of any block size from
2 to 64 tokens, which have no common factor) and far ones (the same for blocks up to 512);
small, so that what they leave in the cache is little (a cache that keeps what was hit twice
keeps them)."""
SHARED, TAIL = 300, 50


@dataclass
class Grain:
    """What the granularity experiment found. `block`: tokens per block (1: tokens; None:
    unknown); `head`: tokens of any prompt served from the one before it (the chat template's
    start); `overhead`: a prompt's tokens besides its text; `counts`: the engine reports cached
    tokens; `fixed_s`: what a request costs besides its prefill; `cold_tps`: the cold
    prefill's speed (tokens per second of the engine's prefill time, else of the TTFT);
    `server_time`: that speed is from the engine's own prefill time."""

    block: int | None = None
    head: int = 0
    overhead: int = 0
    counts: bool = True
    fixed_s: float = 0.0
    cold_tps: float | None = None
    server_time: bool = False
    growth: tuple[float, float] = (0.0, 0.0)  # a cold prefill of n: b n + c n^2 seconds
    notes: list[str] = field(default_factory=list)

    def blocks(self, tokens: int) -> int:
        """Full blocks of `tokens` (the cached part of a prompt of that many)."""
        return tokens // (self.block or 1)

    def prefill_s(self, tokens: int) -> float:
        """A cold prefill of `tokens`, as the cold sizes measured it (attention makes late
        tokens dearer: the fit holds a square term)."""
        b, c = self.growth
        if b <= 0 and c <= 0:
            return tokens / (self.cold_tps or 1e12)
        return b * tokens + max(0.0, c) * tokens * tokens


async def measure(lab: Lab, salt: str) -> tuple[Grain, Property]:
    """Run the experiment (see the module). Output: what it found, the card's property."""
    limit = lab.max_context or 1 << 30
    sizes = [n for n in SIZES if n + 64 < limit] or [max(16, limit // 4)]
    shared = min(SHARED, limit // 2)
    params = {"sizes": sizes, "shared_tokens": shared, "tail_tokens": TAIL}
    worst = 2 * sum(sizes) + 2 * (shared + TAIL) + 64 * len(sizes)
    records = await lab.run("granularity", params, salt, worst_tokens=worst)
    grain = analyse(records, sizes)
    lab.ledger.extend(prompts(records, grain, salt))
    return grain, card_property(records, grain)


def analyse(records: list[Record], sizes: list[int]) -> Grain:
    """Output: the `Grain` the records show."""
    by = {(r.label, r.index): r for r in records if r.error is None and not r.skipped}
    cold = [by[("cold", i)] for i in range(len(sizes)) if ("cold", i) in by]
    again = [by[("again", i)] for i in range(len(sizes)) if ("again", i) in by]
    grain = Grain()
    grain.counts = bool(again) and all(r.cached_tokens is not None for r in again + cold)
    grain.overhead = round(statistics.median(
        [r.prompt_tokens - n for r, n in zip(cold, sizes) if r.prompt_tokens] or [0]))
    price(grain, cold, again)
    if not grain.counts:
        grain.notes.append("the engine reports no cached tokens")
        return grain
    grain.head = min((r.cached_tokens or 0) for r in cold[1:]) if len(cold) > 1 else 0
    grain.block = block_size(again)
    return grain


def block_size(again: list[Record]) -> int | None:
    """The block size the re-sends show: 1 when each was served all but its last token, else
    the greatest common divisor of what they were served, when every one is the whole blocks
    below its prompt; None when they fit neither."""
    served = [(r.cached_tokens or 0, (r.prompt_tokens or 1) - 1) for r in again]
    if all(c == full for c, full in served):
        return 1
    b = 0
    for c, _ in served:
        b = math.gcd(b, c)
    if b <= 1 or any(c != full // b * b for c, full in served):
        return None
    return b


def price(grain: Grain, cold: list[Record], again: list[Record]) -> None:
    """The cold prefill's speed: over the engine's own prefill time when it reports one, else
    over the TTFT beyond what a served re-send took (a request's cost besides its prefill)."""
    server = [r for r in cold if r.server_prefill_ms]
    grain.server_time = len(server) == len(cold) and bool(cold)
    if grain.server_time:
        grain.fixed_s = 0.0
        samples = [(uncached(r), r.server_prefill_ms / 1000) for r in cold
                   if r.server_prefill_ms]  # every one of them
    else:
        fixed = [r.ttft_s for r in again if r.ttft_s is not None]
        grain.fixed_s = min(fixed) if fixed else 0.0
        samples = [(uncached(r), r.ttft_s - grain.fixed_s) for r in cold
                   if r.ttft_s is not None]
    grain.cold_tps = speed(samples)
    grain.growth = quadratic(samples)


def quadratic(samples: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of t = b n + c n^2 over the samples; (0, 0) without enough of them."""
    good = [(float(n), t) for n, t in samples if n > 0 and t > 0]
    if len(good) < 3:
        return 0.0, 0.0
    s2 = sum(n * n for n, _ in good)
    s3 = sum(n ** 3 for n, _ in good)
    s4 = sum(n ** 4 for n, _ in good)
    t1 = sum(n * t for n, t in good)
    t2 = sum(n * n * t for n, t in good)
    det = s2 * s4 - s3 * s3
    if det <= 0:
        return 0.0, 0.0
    return (t1 * s4 - t2 * s3) / det, (s2 * t2 - s3 * t1) / det


def uncached(r: Record) -> int:
    return (r.prompt_tokens or r.planned_prompt_tokens) - (r.cached_tokens or 0)


def speed(samples: list[tuple[int, float]]) -> float | None:
    """Tokens per second over the samples (their tokens over their seconds), None without a
    usable one."""
    good = [(n, s) for n, s in samples if n > 0 and s > 0]
    if not good:
        return None
    return sum(n for n, _ in good) / sum(s for _, s in good)


def prompts(records: list[Record], grain: Grain, salt: str) -> list[Prompt]:
    """The experiment's requests as the hypothesis caches see them (`model.Prompt`)."""
    out = []
    head = grain.blocks(grain.head)
    shared = None
    for r in records:
        if r.skipped or r.prompt_tokens is None:
            continue
        n = grain.blocks(r.prompt_tokens)
        units = [("head", head)] if head else []
        if r.label in ("first", "other"):
            other = next((x for x in records if x.label == "other"), None)
            shared = grain.blocks((other.cached_tokens or 0) if other else 0) - head
            units += [(f"{salt}:pair", max(0, shared)), (f"{salt}:{r.label}",
                                                         max(0, n - head - max(0, shared)))]
        else:
            units.append((f"{salt}:size{r.index}", max(0, n - head)))
        kept = tuple(u for u in units if u[1] > 0)
        out.append(Prompt(kept, cap=grain.blocks(r.prompt_tokens - 1),
                          answer=answer_keys(r, grain, kept[-1][0] if kept else "")))
    return out


def answer_keys(r: Record, grain: Grain, leaf: str) -> tuple[str, ...]:
    """The blocks a request's answer leaves after its prompt (its partial last block and the
    tokens generated, `(prompt mod B + generated) // B` whole blocks), each named by the prompt
    (`leaf`) and the answer's words up to the block's end (a word is taken for a token)."""
    b = grain.block or 1
    tail = (r.prompt_tokens or 0) % b
    words = r.reply_excerpt.split()
    n = (tail + (r.completion_tokens or 0)) // b
    keys = []
    for j in range(n):
        upto = (j + 1) * b - tail
        digest = hashlib.sha256(" ".join(words[:upto]).encode()).hexdigest()[:10]
        keys.append(f"{leaf}#{upto}:{digest}")
    return tuple(keys)


def card_property(records: list[Record], grain: Grain) -> Property:
    ids = [r.id for r in records if not r.skipped]
    if not grain.counts:
        return Property(status="unknown", experiment="granularity", requests=ids,
                        reason="the engine reports no cached tokens, and a block's prefill is "
                               "below what its timings can resolve")
    if grain.block is None:
        served = ", ".join(f"{r.cached_tokens}/{r.prompt_tokens}" for r in records
                           if r.label == "again")
        return Property(status="unknown", experiment="granularity", requests=ids,
                        reason=f"the re-sent prompts were served {served} tokens: neither all "
                               "but the last token nor whole blocks of one size")
    other = next((r for r in records if r.label == "other"), None)
    shared = other is not None and (other.cached_tokens or 0) > grain.head + 16
    unit = "token" if grain.block == 1 else "block"
    value = {"unit": unit, "block_tokens": grain.block,
             "partial_block_served": None if grain.block == 1 else False,
             "shared_prefix_served": shared,
             "shared_prefix_tokens": other.cached_tokens if other else None,
             "template_head_tokens": grain.head}
    what = "tokens (all but the last token of a prompt)" if grain.block == 1 else \
        f"blocks of {grain.block} tokens; a prompt's last partial block is not served"
    pair = (f"a prefix two prompts share is served ({other.cached_tokens:,} tokens)"
            if shared and other else "only whole prompts are served, not a prefix two prompts share")
    return Property(status="known", summary=f"{what}; {pair}", value=value,
                    experiment="granularity", requests=ids,
                    basis=f"the cached tokens of prompts of {len(SIZES)} sizes sent twice (their "
                          "greatest common divisor), and of two prompts that share a prefix")
