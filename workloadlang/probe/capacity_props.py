"""The card's properties from the capacity runs: device and host capacity with the retained
curve, eviction order, restore speed per tier, and the engine's slots.

Input: `capacity.Fill`, the granularity's `Grain`, the probe's options and the engine's fields.
Output: `card.Property`s, each `known` with its interval and basis, or `unknown` with why.
"""

from __future__ import annotations

import statistics
from typing import Any

from workloadlang.card import Property
from workloadlang.probe.capacity import Fill
from workloadlang.probe.granularity import Grain
from workloadlang.probe.prices import Speeds, floor_of, speeds

EXPERIMENT = "capacity"


def ids(fill: Fill) -> list[str]:
    return [r.id for r in fill.records + fill.walk + list(fill.refs.values()) if not r.skipped]


def capacities(fill: Fill, grain: Grain) -> tuple[Property, Property]:
    """The device and host capacity (see the module)."""
    b = grain.block or 1
    if not grain.counts:
        why = "the engine reports no cached tokens: what a read was served cannot be counted"
        return unknown(why, fill), unknown(why, fill)
    if not fill.stopped:
        sent = fill.hydrated * fill.context
        why = (f"every context was still served whole after {sent:,} tokens were filled "
               f"({fill.hydrated} contexts of {fill.context:,}): the cache keeps more than "
               "that" + ("; --budget-tokens stopped the probe there" if fill.budget_bound
                         else ""))
        low = {"more_than_tokens": sent}
        return unknown(why, fill, low), unknown("the device kept everything sent", fill)
    fitted = bool(fill.fits) and len({f.policy for f in fill.fits}) == 1
    if not fitted and not whole_contexts(fill, grain):
        why = ("no LRU, FIFO or LFU cache explains every cached count, and reads came back in "
               "part: what was read back cannot be summed into a capacity")
        return unknown(why, fill), unknown(why, fill)
    total = total_interval(fill, b)
    if fill.tiers.doubt:
        why = (f"{fill.tiers.doubt}; all tiers together keep {total[0]:,}-{total[1]:,} tokens, "
               "how they split is not known")
        low = {"all_tiers_low": total[0], "all_tiers_high": total[1]}
        return unknown(why, fill, low), unknown(fill.tiers.doubt, fill)
    if fill.device_blocks is None:
        host = Property(status="known", summary="none seen: every read served whole cost the "
                        "same (a tier that restores as fast as the device would look the same: "
                        "the device capacity is then what both keep)",
                        value={"tokens": 0, "seen": False}, experiment=EXPERIMENT,
                        requests=ids(fill), basis="the price of every read served whole")
        device = capacity_prop("device", total, fill, grain)
        device.summary += " (in all tiers: no slower one seen by price)"
        return device, host
    dev = fill.device_blocks * b
    spread = fill.device_spread * b
    kept = (max(0, dev - spread), dev + spread)
    return (capacity_prop("device", kept, fill, grain, tiered=True),
            capacity_prop("host", (max(0, total[0] - kept[1]), max(0, total[1] - kept[0])),
                          fill, grain, tiered=True))


def whole_contexts(fill: Fill, grain: Grain) -> bool:
    """True when every read was served whole or nothing of its own (a cache that keeps and
    drops whole prompts: its capacity is the contexts read back whole, within one)."""
    for r in fill.records + fill.walk:
        if r.skipped or r.cached_tokens is None or r.hit is not False:
            continue
        if not nothing_own(r, grain):
            return False
    return True


def nothing_own(r, grain: Grain) -> bool:
    """True when a request was served nothing of its own: what every prompt shares (the
    template's start), a block, or the first few tokens of its tag (a token cache that matches
    the longest common prefix with another context serves those)."""
    prompt = r.prompt_tokens or r.planned_prompt_tokens
    return (r.cached_tokens or 0) <= grain.head + max(grain.block or 1, prompt // 50)


def total_interval(fill: Fill, b: int) -> tuple[int, int]:
    """The total capacity in tokens: the fitted hypotheses' interval when they agree, else the
    walk's direct reading (what it read whole, up to a context more)."""
    if fill.fits and len({f.policy for f in fill.fits}) == 1:
        return min(f.low for f in fill.fits) * b, max(f.high for f in fill.fits) * b
    kept = sum(c for _, c, _ in fill.kept)
    return kept, kept + fill.context


def capacity_prop(tier: str, span: tuple[int, int], fill: Fill, grain: Grain,
                  tiered: bool = False) -> Property:
    lo, hi = span
    mid = (lo + hi) // 2
    fitted = bool(fill.fits) and len({f.policy for f in fill.fits}) == 1
    unit = "block" if fitted and hi - lo <= (grain.block or 1) else "context"
    how = ("the eviction order fitted to every cached count" if fitted else
           "the contexts read back whole (no eviction order fits every count: within a "
           "context)")
    if tiered:
        how += "; the device and the host told apart by each read's price"
    value = {"tokens": mid, "low": lo, "high": hi, "within": unit,
             "contexts": round(mid / max(1, fill.context), 2), "context_tokens": fill.context,
             "curve": curve(fill) if tier == "device" else []}
    text = f"{mid:,} tokens" if lo == hi else f"{mid:,} tokens ({lo:,}-{hi:,})"
    return Property(status="known", summary=f"{text} = {value['contexts']:g} contexts of "
                    f"{fill.context:,}", value=value, interval=[lo, hi], basis=how,
                    experiment=EXPERIMENT, requests=ids(fill))


def curve(fill: Fill) -> list[dict[str, Any]]:
    """The retained curve: for each context the walk read, newest use first, the tokens
    filled up to it and the tokens kept of them, and the tier it was read from."""
    out, filled, kept = [], 0, 0
    sizes = {fill.tag[id(r)]: r.prompt_tokens for r in fill.sent if r.prompt_tokens}
    for tag, cached, tier in fill.kept:
        filled += sizes.get(tag) or fill.context
        kept += cached
        out.append({"filled": filled, "kept": kept, "tier": tier})
    return out


def unknown(why: str, fill: Fill, value: dict | None = None) -> Property:
    return Property(status="unknown", reason=why, value=value or {}, experiment=EXPERIMENT,
                    requests=ids(fill))


def eviction_order(fill: Fill, grain: Grain) -> Property:
    """LRU, FIFO or LFU, and which end of a sequence goes first, from the fits."""
    if not grain.counts:
        return unknown("the engine reports no cached tokens", fill)
    if not fill.stopped:
        return unknown("nothing was evicted within what the probe filled", fill)
    if not fill.fits:
        return unknown("no LRU, FIFO or LFU cache of a capacity near what was read back "
                       "serves every count the engine reported (the engine evicts otherwise: "
                       "whole contexts, by priority, ...)", fill)
    policies = sorted({f.policy for f in fill.fits})
    if len(policies) > 1:
        return unknown(f"{' and '.join(p.upper() for p in policies)} each explain every "
                       "count: the reads did not tell them apart", fill,
                       {"candidates": policies})
    ends = sorted({f.end for f in fill.fits})
    end = ends[0] if len(ends) == 1 else None
    names = {"lru": "least recently used first", "fifo": "first placed first",
             "lfu": "fewest hits first (least recently used among equals)"}
    within = {"tail": "a partly evicted prefix keeps its head (the tail goes first)",
              "head": "the head of a sequence goes first (what is left of it cannot be "
                      "matched)", None: "which end of a sequence goes first is not known: the "
                      "victims went whole"}[end]
    return Property(status="known", summary=f"{policies[0].upper()} ({names[policies[0]]}); "
                    f"{within}", value={"policy": policies[0], "evicts_first": end},
                    basis="designed access orders whose first victims differ by order; every "
                          "cached count fitted by LRU, FIFO and LFU caches, tail- and "
                          "head-first", experiment=EXPERIMENT, requests=ids(fill))


def restore_speed(fill: Fill, grain: Grain, kv_bytes: float | None) -> Property:
    """Tokens per second of a context's cached part: cold, from the device, from the host."""
    size = statistics.median(r.prompt_tokens for r in fill.records if r.prompt_tokens) \
        if any(r.prompt_tokens for r in fill.records) else 0
    cold = [r for r in fill.records if r.cached_tokens is not None and r.label == "send"
            and nothing_own(r, grain) and abs((r.prompt_tokens or 0) - size) <= 2]
    whole = [r for r in fill.walk + fill.records if r.hit]
    if not whole or not cold:
        return unknown("no context was both filled and read back whole", fill)
    cached = int(statistics.median(r.cached_tokens or 0 for r in whole))
    tail_s = statistics.median(fill.tiers.tail(r) for r in whole)
    s = speeds(fill.tiers, cold, cached, tail_s)
    return speed_prop(s, fill, kv_bytes, cached)


def speed_prop(s: Speeds, fill: Fill, kv_bytes: float | None, cached: int) -> Property:
    value: dict[str, Any] = {"cold_tps": s.cold, "cold_signal": s.cold_signal,
                             "device_tps": s.device,
                             "device_bound": s.device_bound, "host_tps": s.host,
                             "tokens": cached, "signal": fill.tiers.signal}
    if s.host is None and fill.tiers.device_s is not None and not fill.tiers.doubt:
        # a restore faster would not show
        value["host_unseen_over_tps"] = cached / floor_of(fill.tiers)
    if kv_bytes:
        for k in ("cold", "device", "host", "host_unseen_over"):
            tps = value.get(f"{k}_tps")
            value[f"{k}_gbps"] = None if tps is None else tps * kv_bytes / 1e9
    value["host_faster_than_recompute"] = (None if s.host is None or s.cold is None
                                           else s.host > 1.1 * s.cold)
    parts = [f"cold {fmt_tps(s.cold)}",
             f"device {'over ' if s.device_bound else ''}{fmt_tps(s.device)}"]
    if s.host is not None:
        parts.append(f"host {fmt_tps(s.host)}")
        if not value["host_faster_than_recompute"]:
            parts.append("the host tier restores no faster than a recompute")
    elif fill.tiers.doubt:
        value["host_doubt"] = fill.tiers.doubt
        parts.append("host tier not decided (see host_capacity)")
    elif "host_unseen_over_tps" in value:
        parts.append(f"no host tier seen (a restore over "
                     f"{fmt_tps(value['host_unseen_over_tps'])} would not show)")
    if kv_bytes and s.host:
        parts.append(f"host {value['host_gbps']:.2f} GB/s")
    timer = {"server": "the engine's prefill time", "ttft": "the TTFT"}
    return Property(status="known", summary="; ".join(parts), value=value,
                    basis=f"contexts of {fill.context:,} tokens timed alone: each cold send "
                          f"({timer[s.cold_signal]}), each read served whole by tier "
                          f"({timer[fill.tiers.signal]}) against its repeat sent right after "
                          "it, over the time beyond the uncached last tokens",
                    experiment=EXPERIMENT, requests=ids(fill))


def fmt_tps(tps: float | None) -> str:
    if tps is None:
        return "–"
    if tps >= 1e6:
        return f"{tps / 1e6:.2f}M tokens/s"
    return f"{tps / 1e3:.1f}k tokens/s" if tps >= 1e3 else f"{tps:.0f} tokens/s"


def slots(engine: dict[str, Any]) -> Property:
    """Requests the engine runs at once and each one's context, as it states them."""
    n, ctx = engine.get("slots"), engine.get("max_context")
    if n is None and ctx is None:
        return Property(status="unknown", reason="the engine states neither (no /props "
                        "total_slots, no context limit in /models)")
    return Property(status="known", summary=f"{n if n is not None else '?'} slots of "
                    f"{ctx:,} tokens" if ctx else f"{n} slots",
                    value={"slots": n, "slot_context": ctx,
                           "context_source": engine.get("max_context_source")},
                    basis="as the engine states them: /props total_slots, the context limit "
                          f"from {engine.get('max_context_source') or 'nowhere'}")


def naive_bisection(total_tokens: int, context: int) -> int:
    """What finding `total_tokens` one context at a time costs: fill n fresh contexts and read
    the oldest back, n doubling until it is evicted, then bisecting between the last two n.
    Output: the tokens prefilled."""
    per = max(1, context)
    holds = max(1, total_tokens // per)  # contexts the cache keeps whole
    cost, n = 0, 1
    while n <= holds:
        cost += n * per
        n *= 2
    cost += n * per
    lo, hi = n // 2, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cost += mid * per
        lo, hi = (mid, hi) if mid <= holds else (lo, mid)
    return cost
