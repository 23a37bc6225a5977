"""Two more properties from the capacity runs' reads: the shared prefix under pressure, and
integrity.

Input: `capacity.Fill` (its records, each one's context, the reads' tiers) and the lab (the
engine's tokenizer). Output: the card's `shared_prefix` and `integrity` properties.

The shared prefix is one context sent again in every round while the rounds fill the cache with
contexts used once or twice: kept when it was served whole at every use. Integrity compares
every context's greedy answers (temperature 0, seed 0): the first, cold, with each later one
served whole from the device, and with each restored from the host tier (by its price).
"""

from __future__ import annotations

from typing import Any

from workloadlang.card import Property
from workloadlang.probe.capacity import Fill
from workloadlang.probe.lab import Lab
from workloadlang.probe.prices import place
from workloadlang.results import Record

EXPERIMENT = "capacity"


def shared_prefix(fill: Fill) -> Property:
    """Was the shared context served whole at every use after the first?"""
    sent = [r for r in fill.records if not r.skipped and fill.tag[id(r)] == fill.shared]
    ids = [r.id for r in sent]
    uses = [r for r in sent[1:] if r.hit is not None]
    if not uses:
        return Property(status="unknown", experiment=EXPERIMENT, requests=ids,
                        reason="the prefix's uses were not judged (no cached tokens reported)")
    filled = tokens_filled(fill)
    between = [filled[id(b)] - filled[id(a)] for a, b in zip(sent, sent[1:])]
    lost = next((r for r in uses if not r.hit), None)
    churn = filled[id(uses[-1])] - filled[id(sent[0])]
    value = {"kept": lost is None, "uses": len(uses), "prefix_tokens": fill.context,
             "churn_between_uses": max(between, default=0), "churn_tokens": churn,
             "served": [r.cached_tokens for r in uses]}
    if lost is None:
        text = (f"kept: served whole at each of {len(uses)} uses while {churn:,} tokens of "
                f"other contexts filled the cache (up to {value['churn_between_uses']:,} "
                "between two uses)")
    else:
        value["lost_after_tokens"] = filled[id(lost)] - filled[id(sent[0])]
        text = (f"lost after {value['lost_after_tokens']:,} tokens of other contexts, although "
                f"used again every {value['churn_between_uses']:,} at most")
    return Property(status="known", summary=text, value=value, experiment=EXPERIMENT,
                    requests=ids, basis="one context sent again every round while each round "
                                        "filled a quarter more contexts")


def tokens_filled(fill: Fill) -> dict[int, int]:
    """Per sent record (by `id`), the tokens of contexts filled (first sends) up to it."""
    seen: set[str] = set()
    total, out = 0, {}
    for r in fill.records:
        if r.skipped:
            continue
        tag = fill.tag[id(r)]
        if tag not in seen:
            seen.add(tag)
            total += r.prompt_tokens or 0
        out[id(r)] = total
    return out


async def integrity(fill: Fill, lab: Lab) -> Property:
    """Each context's answers after its first (cold) one: from the device, and restored from
    the host; identical, or the first position where one differs."""
    cold: dict[str, Record] = {}
    device: list[Record] = []
    host: list[Record] = []
    for r in fill.records + fill.walk:
        if r.skipped or r.error or not r.reply_excerpt:
            continue
        tag = fill.tag[id(r)]
        if tag not in cold:
            cold[tag] = r
        elif r.hit:
            tier = tier_of(r, fill)
            (host if tier == "host" else device if tier == "device" else []).append(r)
    ids = [r.id for r in list(cold.values()) + device + host]
    if not device:
        return Property(status="unknown", experiment=EXPERIMENT, requests=ids,
                        reason="no context was answered cold and again from the device")
    value: dict[str, Any] = {"answer_tokens": 16, "device": await worst(device, cold, fill, lab),
             "host": await worst(host, cold, fill, lab) if host else None,
             "device_reads": len(device), "host_reads": len(host)}
    note = "" if host else (" (no host tier seen)" if not fill.tiers.host else
                            " (no read came whole from the host)")
    text = (f"device: {describe(value['device'])} ({len(device)} reads); host-restored: "
            + (f"{describe(value['host'])} ({len(host)} reads)" if host else "not measured"
               + note))
    return Property(status="known", summary=text, value=value, experiment=EXPERIMENT,
                    requests=ids, basis="every context's greedy answer (temperature 0, seed 0) "
                                        "cold, then each time it was served whole, by tier")


def tier_of(r: Record, fill: Fill) -> str:
    """A read's tier: as the capacity runs' prices placed it, or placed by them (a read made
    after they were grouped)."""
    if r.id in fill.tiers.tier:
        return fill.tiers.tier[r.id]
    t = fill.tiers.time(r)
    return "device" if t is None else place(t, fill.tiers)[0]


async def worst(reads: list[Record], cold: dict[str, Record], fill: Fill, lab: Lab) -> dict:
    """Identical when every read's answer is its context's cold one, else the earliest
    divergence among them."""
    found: dict | None = None
    for r in reads:
        first = cold[fill.tag[id(r)]]
        c = await compare(first, r, lab)
        if not c["identical"] and (found is None or c["diverges_at"] < found["diverges_at"]):
            found = {**c, "request": r.id, "cold_request": first.id,
                     "cold_answer": first.reply_excerpt, "answer": r.reply_excerpt}
    return found or {"identical": True, "diverges_at": None}


async def compare(a: Record, b: Record, lab: Lab) -> dict:
    """`identical`, or where `b`'s answer first differs from `a`'s: in tokens of the engine's
    tokenizer when it has one (the tokens of the common words), else in words."""
    x, y = a.reply_excerpt, b.reply_excerpt
    if x == y:
        return {"identical": True, "diverges_at": None}
    common = 0
    while common < min(len(x), len(y)) and x[common] == y[common]:
        common += 1
    words = x[:common].split()
    if common < len(x) and words and not x[common - 1].isspace():
        words = words[:-1]  # the word the two differ in
    prefix = " ".join(words)
    tokenizer = getattr(lab.engine, "tokenizer", None)
    if tokenizer is not None and prefix:
        return {"identical": False, "diverges_at": await tokenizer.count(prefix),
                "unit": "token"}
    return {"identical": False, "diverges_at": len(words), "unit": "word"}


def describe(c: dict | None) -> str:
    if c is None:
        return "–"
    if c["identical"]:
        return "identical to the cold answer"
    return f"differs from the cold answer from {c['unit']} {c['diverges_at']} on"
