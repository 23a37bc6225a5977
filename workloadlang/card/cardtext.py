"""The cache card as terminal text, and what changed between two cards.

Input: `Card`s. Output: text (`render_card`: one line per property, the retained curve, the
cost next to a naive bisection's, what is unknown and why; `render_compare`: one line per
property that differs, numbers as a ratio or a percentage).
"""

from __future__ import annotations

from typing import Any

from workloadlang.card.contract import PROPERTIES, Card, Property

TITLES = {"granularity": "granularity", "device_capacity": "device capacity",
          "host_capacity": "host capacity", "restore_speed": "restore speed",
          "eviction_order": "eviction order", "idle_lifetime": "idle lifetime",
          "shared_prefix": "shared prefix", "abort_retention": "abort retention",
          "integrity": "integrity", "slots": "slots"}


def render_card(card: Card) -> str:
    """The card for the terminal (see the module)."""
    e = card.engine
    lines = [f"cache card: {e.get('model') or '?'} at {e.get('base_url') or '?'}"
             f" ({e.get('engine') or 'unknown engine'})"]
    width = max(len(t) for t in TITLES.values())
    for name in PROPERTIES:
        p = card.prop(name)
        lines.append(f"  {TITLES[name]:<{width}}  {line_of(p)}")
    curve = card.prop("device_capacity").value.get("curve") or []
    if curve:
        lines.append(f"  {'retained':<{width}}  {curve_text(curve)}")
    lines.append(cost_line(card))
    if card.left_out:
        lines.append(f"left out: {', '.join(card.left_out)} (see each property's reason)")
    return "\n".join(lines) + "\n"


def line_of(p: Property) -> str:
    if p.status == "known":
        return p.summary
    what = "unknown" if p.status == "unknown" else "not measured"
    return f"{what}: {p.reason}"


def curve_text(curve: list[dict[str, Any]], most: int = 8) -> str:
    """The retained curve, at most `most` points: tokens kept of tokens filled (tier)."""
    step = max(1, len(curve) // most)
    points = curve[step - 1::step]
    if points[-1] is not curve[-1]:
        points.append(curve[-1])
    return ", ".join(f"{c['kept']:,}/{c['filled']:,} {c['tier']}" for c in points) + \
        " (kept/filled, newest use first)"


def cost_line(card: Card) -> str:
    c = card.cost
    text = (f"cost: {c.requests:,} requests, {c.prompt_tokens:,} prompt tokens, "
            f"{c.prefilled_tokens:,} prefilled, {c.wall_s:.1f} s")
    device = card.prop("device_capacity")
    if device.status == "known" and device.value.get("tokens"):
        text += f" ({c.prefilled_tokens / device.value['tokens']:.2f}x the device's capacity"
        if c.naive_bisection_tokens:
            text += (f"; a naive bisection one context at a time: "
                     f"{c.naive_bisection_tokens:,} prefilled")
        text += ")"
    return text


# ---------------------------------------------------------------- two cards

NUMBERS = (("device_capacity", "tokens", "device capacity", "tokens"),
           ("host_capacity", "tokens", "host capacity", "tokens"),
           ("restore_speed", "cold_tps", "cold prefill", "speed"),
           ("restore_speed", "device_tps", "device hit", "speed"),
           ("restore_speed", "host_tps", "host restore", "speed"))
WORDS = (("granularity", "block_tokens", "block size"),
         ("eviction_order", "policy", "eviction order"),
         ("eviction_order", "evicts_first", "evicted first"),
         ("shared_prefix", "kept", "shared prefix kept"),
         ("idle_lifetime", "lost_within_s", "lost within (s)"),
         ("slots", "slots", "slots"))


def render_compare(a: Card, b: Card, names: tuple[str, str] = ("A", "B")) -> str:
    """What changed from `a` to `b` (see the module); a property unknown in either is said
    so, never compared."""
    lines = [f"{names[0]}: {a.engine.get('model')} at {a.engine.get('base_url')}",
             f"{names[1]}: {b.engine.get('model')} at {b.engine.get('base_url')}"]
    changed = [c for c in (number_change(a, b, *n) for n in NUMBERS) if c]
    changed += [c for c in (word_change(a, b, *w) for w in WORDS) if c]
    changed += [c for c in (verdict_change(a, b, k) for k in ("prefill_cut", "decode_cut")) if c]
    changed += [c for c in (integrity_change(a, b, k) for k in ("device", "host")) if c]
    lines += [f"  {c}" for c in changed] or ["  no property changed"]
    return "\n".join(lines) + "\n"


def number_change(a: Card, b: Card, prop: str, key: str, title: str, kind: str) -> str | None:
    pa, pb = a.prop(prop), b.prop(prop)
    if pa.status != "known" or pb.status != "known":
        return None if pa.status == pb.status else f"{title}: {pa.status} -> {pb.status}"
    x, y = pa.value.get(key), pb.value.get(key)
    if x is None or y is None or x == y:
        return None if x == y else f"{title}: {fmt(x, kind)} -> {fmt(y, kind)}"
    if kind == "speed":
        ratio = y / x if x else float("inf")
        how = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"
    else:
        how = f"{(y - x) / x:+.1%}" if x else "from none"
    return f"{title}: {fmt(x, kind)} -> {fmt(y, kind)} ({how})"


def fmt(v: Any, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "speed":
        return f"{v / 1e3:,.1f}k tokens/s"
    return f"{v:,}"


def word_change(a: Card, b: Card, prop: str, key: str, title: str) -> str | None:
    x = a.prop(prop).value.get(key) if a.prop(prop).status == "known" else a.prop(prop).status
    y = b.prop(prop).value.get(key) if b.prop(prop).status == "known" else b.prop(prop).status
    return None if x == y else f"{title}: {x} -> {y}"


def verdict_change(a: Card, b: Card, key: str) -> str | None:
    def get(c: Card) -> Any:
        p = c.prop("abort_retention")
        return (p.value.get(key) or {}).get("verdict") if p.status == "known" else p.status

    x, y = get(a), get(b)
    return None if x == y else f"abort ({key.replace('_', ' ')}): {x} -> {y}"


def integrity_change(a: Card, b: Card, key: str) -> str | None:
    def get(c: Card) -> Any:
        p = c.prop("integrity")
        if p.status != "known":
            return p.status
        v = p.value.get(key)
        return None if v is None else ("identical" if v["identical"] else
                                       f"differs from {v['unit']} {v['diverges_at']}")

    x, y = get(a), get(b)
    return None if x == y else f"integrity ({key}): {x} -> {y}"
