"""Run-time calibration: how to size text for this engine, and how a hit looks in TTFT.

Input: the chat `Transport`, an `Endpoint`, the engine's `Tokenizer` (or None) and the plan's
salt. Output: a `Sizer` for the realiser, and a `Calibration` (reported in the results).

Sizing uses the engine's tokenizer endpoint when there is one: the filler vocabulary is
checked against it once (`plan.vocab.verify`: what each filler word costs, and that a filler's
count adds up word by word), after which every filler is sized by arithmetic, with no call per
text; text the table cannot size (a needle sentence) is counted once each. A tokenizer whose
counts do not add up word by word sizes each filler by counting it (a first guess from the
ratio, then corrections). Without one it needs two small
prefills: the same prompt with and without a 2,000-word filler; the difference divided by the
words is the ratio, with the chat-template overhead cancelled out (the original divided the whole
prompt by the characters, biasing small probes). Filler is statistically uniform, so one pair
converges.

The TTFT threshold sends cold/cached twins of a fresh-salted prompt until it has `repeat` clean
pairs, and accepts the midpoint only if every cold sample is slower than every cached one by a
clear margin. A pair whose twins' first-token stamp may be late (the token came in one read
with more of the stream, `ttft_late_s`) is left out of the threshold and measured again with
fresh text, and so is one whose few-word prompt's stamp may be late when the cold speed comes
from the TTFTs (its twins still count), up to `RETRIES` more pairs for each one wanted: on a
busy host the decisive number is measured until it is clean, not judged from a range. Each
pair follows a fresh few-word prompt, whose TTFT is what a request costs here besides its
prefill: the cold prefill speed is over the cold twin's time beyond the fastest of them (noise
only adds time).
"""

from __future__ import annotations

import statistics
from typing import Any

from workloadlang.plan import synth
from workloadlang.plan.realise import ExactSizer, RatioSizer, Sizer
from workloadlang.plan.vocab import VocabSizer, Vocabulary, verify
from workloadlang.resultsmodels import Calibration as Calibration  # re-exported: runs name it here
from workloadlang.run.client import send
from workloadlang.run.endpoint import ChatRequest, Endpoint
from workloadlang.run.sse import Outcome
from workloadlang.wire import Transport

SAMPLE_WORDS = 2000
MIN_SEPARATION = 1.5
BASE_WORDS = 8  # the few-word prompt whose TTFT is a request's cost besides its prefill
RETRIES = 2  # pairs measured again, at most, for each wanted pair a late stamp left out
SYSTEM = "You are a helpful assistant."


def probe(rid: str, user: str, max_tokens: int = 1) -> ChatRequest:
    return ChatRequest(id=rid, messages=[{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": user}],
                       max_tokens=max_tokens, headers={"X-WL-Request": rid}, deadline_s=600)


async def sizer_for(transport: Transport, endpoint: Endpoint, tokenizer: Any,
                    salt: str, cal: Calibration) -> Sizer:
    """A sizer over the engine's tokenizer (its vocabulary checked once, else counting each
    filler), else a ratio sizer from two prefills."""
    sample = synth.filler(salt, "calibrate/sizing", SAMPLE_WORDS)
    if tokenizer is not None:
        return await tokenizer_sizer(tokenizer, salt, sample, cal)
    bare = await send(transport, endpoint, probe("calibrate/sizing/bare", "Hello."))
    full = await send(transport, endpoint, probe("calibrate/sizing/full", "Hello. " + sample))
    cal.sizing_requests = 2
    if bare.prompt_tokens is None or full.prompt_tokens is None:
        cal.notes.append("the engine reported no prompt_tokens: sizing by the plan's estimate "
                         "(1 token per word)")
        return RatioSizer(1.0)
    if full.prompt_tokens <= bare.prompt_tokens:
        cal.notes.append(f"the engine counted {full.prompt_tokens} prompt tokens with "
                         f"{SAMPLE_WORDS} more words than {bare.prompt_tokens}: sizing by the "
                         "plan's estimate (1 token per word)")
        return RatioSizer(1.0)
    grown = full.prompt_tokens - bare.prompt_tokens
    cal.tokens_per_word, cal.sizing = grown / SAMPLE_WORDS, "usage"
    cal.chars_per_token = len(sample) / grown
    return RatioSizer(cal.tokens_per_word)


async def tokenizer_sizer(tokenizer: Any, salt: str, sample: str, cal: Calibration) -> Sizer:
    """Output: `VocabSizer` when the engine's counts of filler add up word by word (checked
    with a few calls), else `ExactSizer` (each filler counted)."""
    vocab = await verify(tokenizer.count, salt)
    if vocab is not None:
        cal.tokenizer_calls, cal.vocabulary = vocab.calls, vocab.exceptions()
        cal.tokens_per_word, cal.sizing = vocab.sample_tokens / SAMPLE_WORDS, "vocabulary"
        cal.chars_per_token = len(sample) / vocab.sample_tokens if vocab.sample_tokens else None
        return VocabSizer(vocab, salt, ExactSizer(tokenizer.count, cal.tokens_per_word))
    n = await tokenizer.count(sample)
    cal.tokens_per_word, cal.sizing = n / SAMPLE_WORDS, "tokenizer"
    cal.chars_per_token = len(sample) / n if n else None
    cal.notes.append("the engine's tokenizer does not count filler word by word: each filler "
                     "is counted before the run")
    return ExactSizer(tokenizer.count, cal.tokens_per_word)


def sizer_of(cal: Calibration, tokenizer: Any, salt: str = "") -> Sizer:
    """Output: the sizer `sizer_for` chose for `cal` (with the plan's `salt`), made again
    without a request (another process of the run, with its own link to the engine's
    tokenizer): the same words for the same tokens."""
    tpw = cal.tokens_per_word or 1.0
    if cal.sizing == "vocabulary" and cal.vocabulary is not None and tokenizer is not None:
        vocab = Vocabulary.from_exceptions(cal.vocabulary)
        return VocabSizer(vocab, salt, ExactSizer(tokenizer.count, tpw))
    if cal.sizing == "tokenizer" and tokenizer is not None:
        return ExactSizer(tokenizer.count, tpw)
    return RatioSizer(tpw if cal.sizing in ("vocabulary", "tokenizer", "usage") else 1.0)


async def ttft_threshold(transport: Transport, endpoint: Endpoint, sizer: Sizer,
                         salt: str, tokens: int, repeat: int, cal: Calibration) -> list[Outcome]:
    """Input: `repeat`, the clean cold/cached pairs wanted. Output: every request sent (a few-word
    prompt, a cold and a cached twin per pair); sets cal.threshold_s when the two separate with
    margin. A pair left out for a late stamp (its twins', or its few-word prompt's when that
    leaves no cold speed) does not count: another is sent, with fresh text,
    up to `repeat * (1 + RETRIES)` pairs in all. A pair that failed counts (the engine's error
    is not the host's noise)."""
    outcomes: list[Outcome] = []
    timed, bases = [], []  # (cold, base) pairs that have a cold speed; every few-word prompt
    words = sizer.words_for(f"calibrate/ttft/{tokens}", tokens)
    want, settled = max(1, repeat), 0  # pairs wanted; pairs used or failed
    for k in range(want * (1 + RETRIES)):
        if settled == want:
            break
        text = synth.filler(salt, f"calibrate/ttft/{k}", words)
        few = synth.filler(salt, f"calibrate/ttft/{k}/base", BASE_WORDS)
        base = await send(transport, endpoint, probe(f"calibrate/ttft/{k}/base", few))
        cold = await send(transport, endpoint, probe(f"calibrate/ttft/{k}/cold", text))
        hot = await send(transport, endpoint, probe(f"calibrate/ttft/{k}/hit", text))
        outcomes += [base, cold, hot]
        bases.append(base)
        speed = cold_speed(cold, base)
        if speed is not None:
            timed.append((cold, base))
            if not cold.server_prefill_ms and base.ttft_s is not None:
                cal.fixed_s.append(base.ttft_s)
        if cold.error or hot.error or cold.ttft_s is None or hot.ttft_s is None:
            cal.notes.append(f"threshold probe {k} failed: {(cold.error or hot.error)}")
            settled += 1
            continue
        late = max(cold.ttft_late_s or 0.0, hot.ttft_late_s or 0.0)
        if late:  # a threshold is not drawn from a TTFT that may be too long (`ttft_late_s`)
            cal.notes.append(f"threshold probe {k} not used: a first-token stamp may be up to "
                             f"{late * 1000:.1f} ms late")
            continue
        cal.cold_ttft_s.append(cold.ttft_s)
        cal.hit_ttft_s.append(hot.ttft_s)
        if hot.server_prefill_ms is not None and cold.server_prefill_ms is not None:
            cal.hit_prefill_s.append(hot.server_prefill_ms / 1000)
            cal.cold_prefill_s.append(cold.server_prefill_ms / 1000)
        if speed is None and not cold.server_prefill_ms and base.ttft_late_s:
            cal.notes.append(f"threshold probe {k}'s cold speed not used: the few-word "
                             "prompt's first-token stamp may be up to "
                             f"{base.ttft_late_s * 1000:.1f} ms late")
            continue
        settled += 1
    floor = fastest_base(bases)
    for cold, base in timed:
        speed = cold_speed(cold, base, floor)
        if speed is not None:
            cal.cold_prefill_tps.append(speed)
            cal.cold_took_s.append(took(cold, base, floor))
    decide_threshold(cal, tokens)
    return outcomes


RESOLVE_S = 0.02  # a cold twin's TTFT beyond a few-word prompt's: shorter, noise is most of it
RESOLVE_SERVER_S = 0.001  # the engine's own prefill time, which holds none of the client's
GROW = 8  # each larger cold prefill measured to resolve the speed: this many times the last


def took(cold: Outcome, base: Outcome, floor: float | None) -> float:
    """Output: what a cold speed (`cold_speed`) is over: the engine's own prefill time, else the
    cold twin's TTFT beyond the faster of its few-word prompt's and `floor`."""
    if cold.server_prefill_ms:
        return cold.server_prefill_ms / 1000
    return (cold.ttft_s or 0.0) - min(base.ttft_s or 0.0, (base.ttft_s or 0.0) if floor is None
                                      else floor)


def resolves(cal: Calibration) -> float:
    """Output: how long a cold prefill must take for its speed to be the engine's rather than
    noise's: `RESOLVE_SERVER_S` over the engine's own prefill time, else `RESOLVE_S`."""
    return RESOLVE_SERVER_S if cal.hit_prefill_s else RESOLVE_S


async def resolve_speed(transport: Transport, endpoint: Endpoint, sizer: Sizer, salt: str,
                        tokens: int, cal: Calibration, limit: int) -> None:
    """The cold speed measured where it is the engine's: when no cold twin of `tokens` took
    `resolves(cal)` (a prefill too quick here to time at that size), a cold prompt `GROW`
    times larger each time, after a fresh few-word prompt, up to `limit` tokens, until one
    does (the last at `limit`). Then only the speeds that resolve are kept; none does: no cold
    speed (a note says so: timing cannot tell a hit from a recompute at these sizes here)."""
    size, bases = tokens, []
    while not any(t >= resolves(cal) for t in cal.cold_took_s) and size < limit:
        size = min(size * GROW, limit)
        key = f"calibrate/speed/{size}"
        few = synth.filler(salt, f"{key}/base", BASE_WORDS)
        bases.append(await send(transport, endpoint, probe(f"{key}/base", few)))
        cold = await send(transport, endpoint, probe(f"{key}/cold", synth.filler(
            salt, key, sizer.words_for(key, size))))
        floor = fastest_base(bases)
        speed = cold_speed(cold, bases[-1], floor)
        if speed is not None:
            cal.cold_prefill_tps.append(speed)
            cal.cold_took_s.append(took(cold, bases[-1], floor))
    kept = [(s, t) for s, t in zip(cal.cold_prefill_tps, cal.cold_took_s) if t >= resolves(cal)]
    if not kept:
        cal.too_quick_tokens = size
        cal.notes.append(f"a cold prefill of up to {size:,} tokens took under "
                         f"{resolves(cal) * 1000:.0f} ms here: too quick to time apart from a "
                         "hit; no cold speed")
    cal.cold_prefill_tps = [s for s, _ in kept]
    cal.cold_took_s = [t for _, t in kept]


def fastest_base(bases: list[Outcome]) -> float | None:
    """Input: the calibration's few-word prompts. Output: the fastest TTFT among those that
    answered with their counts and a stamp that is not late (None if none did): what any request
    costs here besides its prefill, with the least noise (noise only adds time)."""
    return min((b.ttft_s for b in bases if b.error is None and b.prompt_tokens
                and b.ttft_s is not None and not b.ttft_late_s), default=None)


def cold_speed(cold: Outcome, base: Outcome, floor: float | None = None) -> float | None:
    """Input: a cold twin and `base`, a fresh few-word prompt sent just before it; `floor`, the
    fastest few-word TTFT of the calibration (`fastest_base`) if known. Output: the cold prefill
    speed in uncached tokens per second: over the engine's own prefill time when it reports one;
    else over what the cold twin's TTFT took beyond a few-word prompt's, for the uncached tokens
    it had beyond the base (what any request costs besides its prefill, its sending,
    scheduling and first decode step, cancels out: a small probe's TTFT is mostly that, and a
    speed over the whole TTFT would be several times too slow on a loaded host, so a recompute
    would pass for a hit). The few-word TTFT taken off is the faster of the base's and `floor`:
    a base slowed by noise would leave the cold twin too little time, and a speed several times
    the engine's (timing then cannot tell). Neither is cached, so this holds whatever the
    engine's cache does. None when unknown: an error, counts missing, or a stamp late by more
    than 5 % of the difference (nothing else is in flight during calibration)."""
    if cold.error is not None or not cold.prompt_tokens:
        return None
    uncached = cold.prompt_tokens - (cold.cached_tokens or 0)
    if cold.server_prefill_ms:
        return uncached / (cold.server_prefill_ms / 1000)
    if base.error is not None or not base.prompt_tokens:
        return None
    if cold.ttft_s is None or base.ttft_s is None:
        return None
    work = uncached - (base.prompt_tokens - (base.cached_tokens or 0))
    took = cold.ttft_s - min(base.ttft_s, base.ttft_s if floor is None else floor)
    late = max(cold.ttft_late_s or 0.0, base.ttft_late_s or 0.0)
    if work <= 0 or took <= 0 or late > 0.05 * took:
        return None
    return work / took


def decide_threshold(cal: Calibration, tokens: int) -> None:
    """Midpoint (geometric) between the slowest hit and the fastest cold sample, if they are
    separated by at least MIN_SEPARATION; otherwise no TTFT classification at all."""
    if not cal.cold_ttft_s or not cal.hit_ttft_s:
        cal.notes.append("no threshold: no complete cold/cached pair")
        return
    fastest_cold, slowest_hit = min(cal.cold_ttft_s), max(cal.hit_ttft_s)
    cal.separation = fastest_cold / slowest_hit if slowest_hit > 0 else None
    if cal.separation is None or cal.separation < MIN_SEPARATION:
        cal.notes.append(
            f"no threshold: cold {statistics.median(cal.cold_ttft_s):.4f}s vs cached "
            f"{statistics.median(cal.hit_ttft_s):.4f}s do not separate by {MIN_SEPARATION}x "
            "(engine not caching, or the context is too small to tell by timing)")
        return
    cal.threshold_s = (fastest_cold * slowest_hit) ** 0.5
    cal.threshold_tokens = tokens
