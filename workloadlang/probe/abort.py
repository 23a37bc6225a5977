"""Abort retention, from `probes/abort` run twice: what a request cut during its prefill and
one cut during its decode leave in the cache.

Input: the lab and the granularity's `Grain` (the cold prefill's speed sizes the prompt so the
cut falls inside its prefill). Output: the card's `abort_retention` property.

The first run sends a prompt and gives it up a quarter into its prefill (its timeout); the
second sends the first 60 % of the same prompt again (the part a prefill that kept its chunks
had reached by the cut is served, or nothing; all of it when the prefill went on after the
cut), then streams an answer, closes it after a few tokens, and sends the conversation on
with the partial answer in it: served the prompt and the tokens generated, the prompt only, or
nothing.
"""

from __future__ import annotations

from workloadlang.card import Property
from workloadlang.probe.granularity import Grain
from workloadlang.probe.lab import Lab
from workloadlang.results import Record

PREFILL_S = 0.3  # the cut prompt's cold prefill, about
CUT_SHARE = 0.2  # the cut, as a share of it
RESEND = 0.6  # the share of the cut prompt sent again
LATE = 0.6  # a cut this far into the prefill may have come after it (the client held up)
MIN_CUT_S = 0.08
DECODE, REPLY, CUT_TOKENS = 1024, 4096, 64
EXPERIMENT = "abort"
TEMPLATE_TAIL = 8  # tokens a prompt's end adds after its text (end of message, generation prompt)


def prompt_size(lab: Lab, grain: Grain) -> tuple[int, float]:
    """The cut prompt's tokens (a cold prefill of about `PREFILL_S`, within the context limit)
    and the cut's delay (see the module)."""
    limit = (lab.max_context or 1 << 20) - 64
    lo, hi = 512, max(512, limit)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if grain.prefill_s(mid) < PREFILL_S else (lo, mid)
    tokens = min(hi, limit)
    return tokens, max(MIN_CUT_S, CUT_SHARE * grain.prefill_s(tokens) + grain.fixed_s)


async def measure(lab: Lab, grain: Grain, salt: str) -> Property:
    """Both runs (see the module)."""
    tokens, cut = prompt_size(lab, grain)
    limit = (lab.max_context or 1 << 20) - DECODE - 64
    common = {"prompt_tokens": tokens, "decode_tokens": DECODE,
              "reply_tokens": max(CUT_TOKENS + 1, min(REPLY, limit)), "cut_tokens": CUT_TOKENS}
    first = await lab.run("abort", {**common, "cut_prefill": f"{cut:.3f}s"}, salt,
                          worst_tokens=tokens + 64)
    part = max(16, int(tokens * RESEND))
    second = await lab.run("abort", {**common, "prompt_tokens": part, "cut_prefill": "0s"},
                           salt, worst_tokens=part + 2 * DECODE + REPLY + 256)
    ids = [r.id for r in first + second if not r.skipped]
    prefill = prefill_cut(first, second, grain, tokens, cut)
    decode = decode_cut(second, grain)
    if prefill is None and decode is None:
        return Property(status="unknown", experiment=EXPERIMENT, requests=ids,
                        reason="neither cut could be read (see the experiment's records)")
    parts = [f"cut in prefill: {prefill['summary']}" if prefill else "cut in prefill: unknown",
             f"cut in decode: {decode['summary']}" if decode else "cut in decode: unknown"]
    return Property(status="known", summary="; ".join(parts),
                    value={"prefill_cut": prefill, "decode_cut": decode},
                    experiment=EXPERIMENT, requests=ids,
                    basis=f"a {tokens:,}-token prompt given up {cut * 1000:.0f} ms into its "
                          f"prefill, its first {RESEND:.0%} sent again; an answer closed after "
                          f"{CUT_TOKENS} streamed tokens, the conversation sent on")


def prefill_cut(first: list[Record], second: list[Record], grain: Grain, tokens: int,
                cut: float) -> dict | None:
    """What the re-sent half was served after the cut (None when it cannot be read)."""
    sent = next((r for r in first if r.label == "cut_prefill"), None)
    again = next((r for r in second if r.label == "after_prefill"), None)
    if sent is None or again is None or again.cached_tokens is None or again.error:
        return None
    prefill_s = grain.prefill_s(tokens)
    if sent.error is None:
        return {"verdict": "unknown", "summary": "unknown (the prompt was answered before the "
                f"cut at {cut * 1000:.0f} ms: its prefill went faster than the probe measured "
                f"it, {prefill_s * 1000:.0f} ms)", "kept_tokens": None}
    if prefill_s < 2 * cut:
        return {"verdict": "unknown", "summary": "unknown (the prompt's prefill is too short to "
                f"be cut inside: {tokens:,} tokens, the engine's context limit, prefill in "
                f"{prefill_s * 1000:.0f} ms)", "kept_tokens": None}
    if (late := sent.e2e_s or 0.0) > LATE * prefill_s:
        return {"verdict": "unknown", "summary": f"unknown (the cut came {late * 1000:.0f} "
                f"ms after the send, the prefill takes about {prefill_s * 1000:.0f} ms: it may "
                "have fallen after it; the client was held up)", "kept_tokens": None}
    b = grain.block or 1
    kept, of = again.cached_tokens, (again.prompt_tokens or 1) - 1
    verdict = ("none" if kept <= grain.head + b else
               "whole" if kept >= of - TEMPLATE_TAIL - b else "partial")
    text = {"none": "nothing kept",
            "partial": f"{kept:,} tokens kept, the part prefilled before the cut "
                       f"({kept / max(1, tokens):.0%} of the prompt)",
            "whole": "all of it kept (the prefill went on after the cut)"}[verdict]
    return {"verdict": verdict, "summary": text, "kept_tokens": kept, "prompt_tokens": tokens,
            "cut_after_s": round(cut, 3)}


def cut_prompt(cut: Record, on: Record) -> int:
    """The cut request's prompt in the engine's tokens (a cut stream reports no usage): the
    next request's, less the tokens streamed and what the plan adds after them (the end of
    the partial turn, the next user turn, the generation prompt)."""
    if cut.prompt_tokens is not None:
        return cut.prompt_tokens
    added = on.planned_prompt_tokens - cut.planned_prompt_tokens - (cut.abort_after or 0)
    return (on.prompt_tokens or on.planned_prompt_tokens) - cut.streamed_tokens - added


def decode_cut(second: list[Record], grain: Grain) -> dict | None:
    """What the conversation sent on was served after the answer was cut."""
    cut = next((r for r in second if r.label == "cut_decode"), None)
    on = next((r for r in second if r.label == "after_decode"), None)
    if cut is None or on is None or on.cached_tokens is None or on.error:
        return None
    if not cut.aborted:
        return {"verdict": "unknown", "summary": "unknown (the answer ended before the cut)"}
    b = grain.block or 1
    said, kept = cut.streamed_tokens, on.cached_tokens
    prompt = cut_prompt(cut, on)
    verdict = ("all" if kept >= prompt + said // 2 else
               "prompt" if kept >= prompt // b * b - b - 8 else
               "none" if kept <= grain.head + b else "partial")
    text = {"all": "the prompt and the tokens generated before the cut kept",
            "prompt": "the prompt kept, the tokens generated dropped",
            "none": "nothing kept", "partial": f"{kept:,} of the prompt's {prompt:,} kept"}
    return {"verdict": verdict, "summary": text[verdict], "kept_tokens": kept,
            "prompt_tokens": prompt, "streamed_tokens": said}
