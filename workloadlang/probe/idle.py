"""Idle lifetime, from `probes/idle`: does a context survive idle gaps with no other traffic?

Input: the lab, the granularity's `Grain` and the gaps (seconds, `--idle`). Output: the card's
`idle_lifetime` property: each gap kept or lost, and the bracket the lifetime lies in (kept
after the longest gap: at least that; lost after one: less than it).
"""

from __future__ import annotations

from workloadlang.card import Property
from workloadlang.probe.granularity import Grain, answer_keys
from workloadlang.probe.hypotheses import Prompt
from workloadlang.probe.lab import Lab
from workloadlang.results import Record

CONTEXT = 256
EXPERIMENT = "idle"


async def measure(lab: Lab, grain: Grain, gaps: tuple[float, ...], salt: str) -> Property:
    """Run the experiment and read it (see the module)."""
    size = max(CONTEXT, 16 * (grain.block or 1))
    params = {"gaps": [f"{g:g}s" for g in gaps], "context_tokens": size}
    records = await lab.run("idle", params, salt,
                            worst_tokens=(len(gaps) + 1) * (size + grain.overhead + 16))
    lab.ledger.extend(same_prompt(records, grain, f"{salt}:idle"))
    ids = [r.id for r in records if not r.skipped]
    reads = [r for r in records if r.label == "after"]
    if len(reads) != len(gaps) or any(r.skipped or r.error for r in reads):
        return Property(status="not_measured", experiment=EXPERIMENT, requests=ids,
                        reason="the reads after the gaps were not all sent (the time budget, "
                               "an error)")
    if any(r.hit is None for r in reads):
        return Property(status="unknown", experiment=EXPERIMENT, requests=ids,
                        reason="the engine reported no cached tokens and the reads' timings "
                               "do not tell a hit from a cold prefill")
    kept = [{"gap_s": g, "kept": bool(r.hit)} for g, r in zip(gaps, reads)]
    return Property(status="known", summary=summary(kept), value={
        "gaps": kept, "survives_s": max((k["gap_s"] for k in kept if k["kept"]), default=None),
        "lost_within_s": min((k["gap_s"] for k in kept if not k["kept"]), default=None)},
        interval=bracket(kept), experiment=EXPERIMENT, requests=ids,
        basis="one context read back after each idle gap in turn, nothing else sent")


def same_prompt(records: list[Record], grain: Grain, key: str) -> list[Prompt]:
    """The requests, each the same prompt, as the hypothesis caches see them (what they leave
    in the cache counts in the capacity runs after them)."""
    head = grain.blocks(grain.head)
    out = []
    for r in records:
        if r.skipped or r.prompt_tokens is None:
            continue
        units = ((("head", head),) if head else ()) + ((key, grain.blocks(r.prompt_tokens)
                                                         - head),)
        out.append(Prompt(units, cap=grain.blocks(r.prompt_tokens - 1),
                          answer=answer_keys(r, grain, key)))
    return out


def bracket(kept: list[dict]) -> list[float] | None:
    """[at least, less than] seconds: the longest gap kept below the shortest one lost."""
    lost = [k["gap_s"] for k in kept if not k["kept"]]
    held = [k["gap_s"] for k in kept if k["kept"] and (not lost or k["gap_s"] < min(lost))]
    if not lost:
        return None
    return [max(held, default=0.0), min(lost)]


def summary(kept: list[dict]) -> str:
    lost = [k["gap_s"] for k in kept if not k["kept"]]
    longest = max(k["gap_s"] for k in kept)
    if not lost:
        return f"kept through every gap, the longest {longest:g} s"
    lo, hi = bracket(kept) or [0.0, 0.0]
    return (f"lost within {hi:g} s idle" if lo == 0 else
            f"kept through {lo:g} s idle, lost within {hi:g} s")
