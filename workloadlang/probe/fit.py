"""Fitting the hypothesis caches to what the engine served: which eviction orders, and which
capacities, explain every cached count the probe was given.

Input: the probe's requests in order (`model.Prompt`s) with the blocks the engine served each
(None where it did not say), a first guess of the total capacity in blocks, the device's
capacity when there is a host tier (from the prices of the reads: the counts cannot tell the
tiers apart), and a block count one context is worth. Output: per hypothesis
(policy, end) the capacities (in blocks) that reproduce every count: an interval, or None when
no capacity near the guess does.

A hypothesis is simulated over every request (`model.Cache`), stopping at the first count it
gets wrong; whether it served that request more or less than the engine says which way the
capacity lies, so a capacity that explains every count is found by bisection between a few
contexts below the guess and a few above it. From there the interval's ends are found by
bisection too (the counts a capacity explains change only where a block more or less changes
what a request is served).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloadlang.probe.hypotheses import ENDS, POLICIES, Cache, Hypothesis, Prompt


@dataclass(frozen=True)
class Fit:
    """A hypothesis that explains every count, with the total capacities (blocks) that do."""

    policy: str
    end: str
    low: int
    high: int


def verdict(hyp: Hypothesis, prompts: list[Prompt], served: list[int | None]) -> int:
    """0 when `hyp` serves every request what the engine served it (where it said); else at
    the first request it gets wrong, 1 when it served less (the capacity is larger), -1 when
    more."""
    cache = Cache(hyp)
    for p, seen in zip(prompts, served):
        got = cache.serve(p)
        if seen is not None and got != seen:
            return 1 if got < seen else -1
    return 0


def explains(hyp: Hypothesis, prompts: list[Prompt], served: list[int | None]) -> bool:
    """True when `hyp` serves every request what the engine served it (where it said)."""
    return verdict(hyp, prompts, served) == 0


def fit_all(prompts: list[Prompt], served: list[int | None], guess: int, context: int,
            device: int | None = None, above: int = 0) -> list[Fit]:
    """Every (policy, end) that explains the counts at some total capacity near `guess`
    (`context`: a context's blocks, the search's reach is a few of them; `device`: the device's
    blocks when there is a host tier (the rest of the total is the host's), None when there is
    none; `above`: how far above the guess the capacity may be beyond a few contexts: what
    earlier requests may still hold)."""
    found = []
    for policy in POLICIES:
        for end in ENDS:
            span = fit_one(policy, end, prompts, served, guess, context, device, above)
            if span is not None:
                found.append(Fit(policy, end, *span))
    return found


def fit_one(policy: str, end: str, prompts: list[Prompt], served: list[int | None],
            guess: int, context: int, device: int | None,
            above: int = 0) -> tuple[int, int] | None:
    """The interval of total capacities at which (policy, end) explains the counts, or None."""
    def judge(total: int) -> int:
        return 1 if total <= 0 else verdict(hypothesis(policy, end, total, device), prompts,
                                            served)

    low, high = max(1, guess - 2 * context), guess + above + 4 * context
    start = next((t for t in (guess, guess + 1, guess - 1, guess + 2, guess - 2)
                  if judge(t) == 0), None)
    if start is None and (judge(low) < 0 or judge(high) > 0):
        return None  # too much served at the least capacity, or too little at the most
    while start is None and low <= high:  # the first wrong count says which way it lies
        mid = (low + high) // 2
        v = judge(mid)
        if v == 0:
            start = mid
        else:
            low, high = (mid + 1, high) if v > 0 else (low, mid - 1)
    if start is None:
        return None

    def ok(total: int) -> bool:
        return judge(total) == 0

    return edge(ok, start, -1, 4 * context), edge(ok, start, 1, 4 * context)


def edge(ok, start: int, direction: int, reach: int) -> int:
    """The last capacity from `start` in `direction` (within `reach`) that still fits, found by
    doubling out then bisecting back."""
    good, step = start, 1
    while step <= reach and ok(start + direction * step):
        good = start + direction * step
        step *= 2
    bad = start + direction * step
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def hypothesis(policy: str, end: str, total: int, device: int | None) -> Hypothesis:
    if device is None:
        return Hypothesis(policy, end, total, 0)
    on_device = max(1, min(total, device))
    return Hypothesis(policy, end, on_device, total - on_device)


def device_split(fit: Fit, total: int, prompts: list[Prompt], restored: list[float | None],
                 guess: int, reach: int) -> tuple[int, int]:
    """The device's blocks for `fit` at a total of `total`: the split between device and
    host at which the hypothesis restores from the host what each read's price says it
    restored (`restored`: blocks per request, None where the price says nothing). The first
    read it gets wrong says which way the split lies (restoring more than the price says: the
    device is larger), so it is found by bisection within `reach` of `guess`. Output: the range
    of device capacities around it that miss the prices least."""
    def first_off(device: int) -> tuple[int, float]:
        """(which way the device lies: 1 larger, -1 smaller, 0 none off; the total miss)."""
        cache = Cache(Hypothesis(fit.policy, fit.end, device, total - device))
        way, off = 0, 0.0
        for p, seen in zip(prompts, restored):
            cache.serve(p)
            if seen is None:
                continue
            diff = cache.restored - seen
            off += abs(diff)
            if way == 0 and abs(diff) > 0.5:
                way = 1 if diff > 0 else -1
        return way, off

    lo, hi = max(1, guess - reach), min(total, guess + reach)
    while hi - lo > 2:
        mid = (lo + hi) // 2
        way, _ = first_off(mid)
        if way == 0:
            lo = hi = mid
        elif way > 0:
            lo = mid
        else:
            hi = mid
    scores = {d: first_off(d)[1] for d in range(max(1, lo - 2), min(total, hi + 2) + 1)}
    least = min(scores.values())
    near = [d for d, v in scores.items() if v <= least + 0.5]
    return min(near), max(near)
