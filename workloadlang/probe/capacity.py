"""Capacity, tiers and eviction order, from `probes/capacity` run twice.

Input: the lab and the granularity's `Grain`. Output: `Fill` (the contexts, the reads and
their tiers, the fitted capacities and eviction order) for the card's properties
(`capacity_props.py`) and for the experiments after it.

The first run fills contexts in rounds, each round a quarter more, and after each round reads
back one context used in every round (the shared prefix) and, for each eviction order (LRU,
FIFO, LFU), the context that order would evict first (as the probe's own model of the engine,
without evictions, ranks them); it stops at the first read not served whole. Reads served
whole move nothing out, so until that read the cache holds what was sent. Three contexts are touched first so that the three orders' first victims differ:
which read fails tells the orders apart. The second run reads every context back in the order
the fitting order would evict them, last victim first, again until the first one not served
whole: what it reads whole is what the cache keeps, and the price of each read (device or host)
splits it between the tiers. Then every (order, end) hypothesis is fitted to all the counts.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from workloadlang.probe.fit import Fit, device_split, fit_all
from workloadlang.probe.granularity import Grain, answer_keys
from workloadlang.probe.hypotheses import Cache, Hypothesis, Prompt, eviction_order
from workloadlang.probe.lab import Lab
from workloadlang.probe.prices import Tiers, classify
from workloadlang.results import Record

MAX_CONTEXTS = 512
SETTLE = 3  # reads that tell hypotheses apart, at most
ANSWER = 16  # tokens of each greedy answer: compared cold, from the device, from the host
GROWTH = 0.25  # each round fills this share more contexts
ENDLESS = 1 << 40  # blocks: a model cache that never evicts
PREFER = ("lru", "fifo", "lfu")  # which order's walk to take when several fit as well


@dataclass
class Fill:
    """What the capacity runs found (see the module). `context`: a context's prompt tokens;
    `kept`: (tag, cached tokens, tier) of each read of the walk, in its order, up to the first
    one not served whole; `stopped`: the first run met a read not served whole (else the cache
    kept everything sent); `fits`: the hypotheses that explain every count."""

    salt: str
    filler: int = 0
    context: int = 0
    tags: list[str] = field(default_factory=list)
    shared: str = ""  # the context every round uses again (the shared prefix)
    sends: list[str] = field(default_factory=list)  # the first run's, in order
    reads: list[str] = field(default_factory=list)  # the walk's, in order
    hydrated: int = 0  # contexts filled
    budget_bound: bool = False  # the token budget, not the probe's own limit, bounded them
    stopped: bool = False
    stop_tag: str | None = None
    nominated: dict[str, set[str]] = field(default_factory=dict)
    walk_policy: str = "lru"
    walk_end: str = "tail"  # the fitted end (which end of a read a restore brought back)
    records: list[Record] = field(default_factory=list)
    walk: list[Record] = field(default_factory=list)  # the first read of each pair
    refs: dict[str, Record] = field(default_factory=dict)  # a walk read's id -> its repeat
    tag: dict[int, str] = field(default_factory=dict)  # id(record) -> the context it sent
    sent: list[Record] = field(default_factory=list)  # every run's records, in send order
    runs: int = 0
    rounds: list[int] = field(default_factory=list)  # where each round starts in `sends`
    kept: list[tuple[str, int, str]] = field(default_factory=list)
    tiers: Tiers = field(default_factory=Tiers)
    fits: list[Fit] = field(default_factory=list)
    device_blocks: int | None = None  # the device's share from the prices (with a host tier)
    device_spread: int = 0  # its uncertainty, blocks
    guess: int = 0  # the direct reading of the total, blocks
    first: int = 0  # the ledger's index of the first capacity request
    notes: list[str] = field(default_factory=list)


def filler_size(lab: Lab, grain: Grain) -> int:
    """A context's filler: a sixteenth of the context limit, between 256 tokens (and 16
    blocks) and 8,192."""
    limit = lab.max_context or 16384
    size = max(256, 16 * (grain.block or 1), min(8192, limit // 16))
    return min(size, max(16, limit - 64 - grain.overhead))


def kept_ratio(context: int, grain: Grain) -> float:
    """The least share of a read's expected tokens that counts as served whole: half a block
    (at least one token) below what a whole context is served."""
    b = grain.block or 1
    full = (context - 1) // b * b
    return max(0.0, (full - max(0.5, b / 2)) / max(1, context - 1))


async def measure(lab: Lab, grain: Grain, salt: str) -> Fill:
    """Both runs and the analysis (see the module)."""
    fill = Fill(salt=salt, filler=filler_size(lab, grain))
    fill.context = fill.filler + grain.overhead + 2  # the tag and the space after it
    fill.first = len(lab.ledger)
    sends = fill.sends = design(fill, lab, grain)
    worst = fill.context * (fill.hydrated + 1) + len(sends) * (grain.block or 1)
    ratio = kept_ratio(fill.context, grain)
    params = {"order": "given", "context_tokens": fill.filler, "sends": sends, "reads": [],
              "kept": f"{ratio:.6f}", "answer_tokens": ANSWER}
    fill.records = await run(fill, lab, grain, params, worst)
    stop = next((r for r in fill.records if r.hit is False), None)
    fill.stopped, fill.stop_tag = stop is not None, fill.tag[id(stop)] if stop else None
    if not fill.stopped:
        return fill
    walk = fill.reads = walk_order(fill, lab, grain)
    params.update(sends=[], reads=[t for tag in walk for t in (tag, tag)])
    paired = await run(fill, lab, grain, params,
                       fill.context + 2 * len(walk) * (grain.block or 1))
    fill.walk, fill.refs = pairs(paired)
    await asyncio.to_thread(analyse, fill, lab, grain)  # CPU: the event loop stays free
    await settle(fill, lab, grain)
    if fill.tiers.host and len({(f.policy, f.end) for f in fill.fits}) == 1:
        await asyncio.to_thread(split_device, fill, lab, grain)
    return fill


# ---------------------------------------------------------------- the design

def design(fill: Fill, lab: Lab, grain: Grain) -> list[str]:
    """The first run's sends (see the module): three contexts and their touches, then rounds
    of new contexts each followed by every order's next victim, while the budget allows."""
    caches = {p: endless(p, lab.ledger) for p in PREFER}
    limit = budget_contexts(lab, fill)
    sends: list[str] = []

    def send(tag: str) -> None:
        sends.append(tag)
        unit = blocks_of(fill.context, grain)
        for cache in caches.values():
            cache.serve(Prompt(((tag, unit),), cap=unit))

    fill.shared = f"s{fill.salt}"
    fill.tags.append(fill.shared)
    send(fill.shared)  # the prefix in use: sent again every round
    first = [new_tag(fill) for _ in range(3)]
    for tag in first:
        send(tag)
    for tag in (first[1], first[1], first[1], first[2], first[0]):
        send(tag)  # LRU's first victim: first[1]; FIFO's: first[0]; LFU's: first[2]
    fill.budget_bound = limit < MAX_CONTEXTS
    while len(fill.tags) < limit:
        victims = next_victims(caches, fill)
        fill.rounds.append(len(sends))
        for _ in range(min(limit - len(fill.tags), max(1, math.ceil(len(fill.tags) * GROWTH)))):
            send(new_tag(fill))
        send(fill.shared)
        for tag, orders in victims.items():
            fill.nominated.setdefault(tag, set()).update(orders)
            send(tag)
    fill.hydrated = len(fill.tags)
    return sends


def next_victims(caches: dict[str, Cache], fill: Fill) -> dict[str, list[str]]:
    """Each order's first victim among the contexts but the shared one (FIFO's, LRU's, LFU's,
    once each)."""
    out: dict[str, list[str]] = {}
    tags = [t for t in fill.tags if t != fill.shared]
    for policy in ("fifo", "lru", "lfu"):
        ranked = eviction_order(caches[policy], tags)
        if ranked:
            out.setdefault(ranked[0], []).append(policy)
    return out


def budget_contexts(lab: Lab, fill: Fill) -> int:
    """How many contexts the first run may fill: what the token budget allows (half of what
    is left: the other experiments need the rest), at most `MAX_CONTEXTS`."""
    left = lab.tokens_left
    if left is None:
        return MAX_CONTEXTS
    return max(3, min(MAX_CONTEXTS, int(left * 0.5) // max(1, fill.context)))


def new_tag(fill: Fill) -> str:
    """A context's tag: its own first word, so no two contexts share a block."""
    tag = f"k{len(fill.tags)}{fill.salt}"
    fill.tags.append(tag)
    return tag


def endless(policy: str, ledger: list[Prompt]) -> Cache:
    """A model cache of `policy` that never evicts, having served `ledger`."""
    cache = Cache(Hypothesis(policy, "tail", ENDLESS))
    for p in ledger:
        cache.serve(p)
    return cache


def blocks_of(tokens: int, grain: Grain) -> int:
    return tokens // (grain.block or 1)


# ---------------------------------------------------------------- the walk

def pairs(records: list[Record]) -> tuple[list[Record], dict[str, Record]]:
    """The walk's records, each read sent twice in a row: the first reads and, per first read
    (by id), its repeat (a device read of the same prompt in the same stretch: the reference
    its price is taken against)."""
    firsts = [r for r in records if r.index % 2 == 0]
    refs = {records[i].id: records[i + 1] for i in range(0, len(records) - 1, 2)
            if not records[i + 1].skipped}
    return firsts, refs


def walk_order(fill: Fill, lab: Lab, grain: Grain) -> list[str]:
    """Every context, in the order the order that failed first would evict them, its last
    victim first (the contexts the first run's failed read filled again come first)."""
    fill.walk_policy = failed_order(fill, lab)
    cache = Cache(Hypothesis(fill.walk_policy, "tail", ENDLESS))
    for p, r in zip(lab.ledger, ledger_records(fill, lab)):
        if r is not None and r.hit is False:
            cache.segs.pop(p.units[-1][0], None)  # not served whole: it was filled again
        cache.serve(p)
    return list(reversed(eviction_order(cache, fill.tags)))


def failed_order(fill: Fill, lab: Lab) -> str:
    """The eviction order whose first victim, when the round the first run stopped in began,
    was the context that was not served whole (LRU when none or several were)."""
    stop = next(i for i, r in enumerate(fill.records) if r.hit is False)
    start = max((k for k in fill.rounds if k <= stop), default=0)
    sent = sum(1 for r in fill.records[:start] if not r.skipped and r.prompt_tokens)
    ledger = lab.ledger[:fill.first + sent]
    found = [p for p in PREFER
             if next(iter(eviction_order(endless(p, ledger), fill.tags)), None) == fill.stop_tag]
    return found[0] if found else "lru"


def ledger_records(fill: Fill, lab: Lab) -> list[Record | None]:
    """The records beside `lab.ledger`: None before the capacity runs."""
    sent = [r for r in fill.sent if not r.skipped and r.prompt_tokens]
    return [None] * fill.first + sent


async def run(fill: Fill, lab: Lab, grain: Grain, params: dict, worst: int) -> list[Record]:
    """One capacity run: its records, each mapped to the context it sent (`fill.tag`), and
    the sent ones added to the ledger. Each run's records get ids of their own
    (`capacity#N/...`): the runs' plans name their requests alike."""
    fill.runs += 1
    records = await lab.run("capacity", params, fill.salt, worst_tokens=worst)
    fill.sent += records
    for r in records:
        fill.tag[id(r)] = (params["sends"] if r.label == "send" else params["reads"])[r.index]
        r.id = f"capacity#{fill.runs}/{r.id}"
    lab.ledger.extend(prompts(fill, records, grain))
    return records


def prompts(fill: Fill, records: list[Record], grain: Grain) -> list[Prompt]:
    """The sent requests as the hypothesis caches see them."""
    out = []
    head = blocks_of(grain.head, grain)
    for r in records:
        if r.skipped or r.prompt_tokens is None:
            continue
        n = blocks_of(r.prompt_tokens, grain)
        units = ((("head", head),) if head else ()) + ((fill.tag[id(r)], n - head),)
        out.append(Prompt(units, cap=blocks_of(r.prompt_tokens - 1, grain),
                          answer=answer_keys(r, grain, fill.tag[id(r)])))
    return out


# ---------------------------------------------------------------- the analysis

def analyse(fill: Fill, lab: Lab, grain: Grain) -> None:
    """What the walk kept and at what price, the device's share, and the fitted hypotheses."""
    fill.tiers = classify([r for r in fill.walk if r.hit is True], fill.refs,
                          [r for r in fill.records if r.hit is True],
                          lambda r: beyond_cached(r, grain), grain.fixed_s)
    for r in fill.walk:
        if r.skipped:
            break
        tier = fill.tiers.tier.get(r.id, "device" if r.hit else "none")
        fill.kept.append((fill.tag[id(r)], r.cached_tokens or 0, tier if r.hit else "partial"))
        if not r.hit:
            break
    b = grain.block or 1
    fill.guess = sum(c for _, c, _ in fill.kept) // b + dead_blocks(fill, grain)
    if fill.tiers.host:
        device = [c for _, c, tier in fill.kept if tier == "device"]
        split = [(r, fill.tiers.restored.get(r.id, 0.0)) for r in fill.walk
                 if fill.tiers.tier.get(r.id) == "split"]
        part = sum((1 - share) * (r.cached_tokens or 0) for r, share in split)
        fill.device_blocks = int((sum(device) + part) // b) + dead_blocks(fill, grain)
        fill.device_spread = max(1, len(split)) and int(
            fill.context / b * 4 * fill.tiers.spread_s
            / max(1e-9, (fill.tiers.host_s or 0) - (fill.tiers.device_s or 0)))
    served = served_so_far(fill, grain)
    reach = blocks_of(fill.context, grain)
    before = sum({k: n for p in lab.ledger[:fill.first] for k, n in p.units}.values())
    fill.fits = fit_all(lab.ledger, served, fill.guess, reach, fill.device_blocks, before)
    if fill.tiers.host and len({f.policy for f in fill.fits}) == 1:
        split_tiers(fill, lab, grain, served, before)


def split_tiers(fill: Fill, lab: Lab, grain: Grain, served: list, before: int) -> None:
    """The device's capacity at which the fitted order restores from the host what each read's
    price says it did (`fit.device_split`), and the total fitted again with it."""
    split_device(fill, lab, grain)
    fill.fits = fit_all(lab.ledger, served, fill.fits[0].low, blocks_of(fill.context, grain),
                        fill.device_blocks, before) or fill.fits


def split_device(fill: Fill, lab: Lab, grain: Grain) -> None:
    """`fill.device_blocks` and its spread: the device capacities that give the reads' prices,
    over the total's interval (at both its ends)."""
    reach = blocks_of(fill.context, grain)
    restored = [None] * fill.first + [restored_blocks(fill, grain, r) for r in fill.sent
                                      if not r.skipped and r.prompt_tokens]
    fit = fill.fits[0]
    fill.walk_end = fit.end
    spans = [device_split(fit, t, lab.ledger, restored, fill.device_blocks or 1, 2 * reach)
             for t in sorted({fit.low, fit.high})]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    # the prices place the split for a given total; a total known within an interval (the
    # remnant of a context whose head went first cannot be read) leaves the split as unsure
    fill.device_blocks = (lo + hi) // 2
    fill.device_spread = max((hi - lo + 1) // 2, fit.high - fit.low)


def restored_blocks(fill: Fill, grain: Grain, r: Record) -> float | None:
    """The blocks a read restored from the host, by its price: its share of a whole context's
    restore, or, when restoring costs what a recompute does (positions at the end of a prompt
    dearer than at its start), the tokens whose recompute at the end of its cached part (its
    start, when heads go first) costs what it took beyond a device read."""
    share = fill.tiers.restored.get(r.id) if r.hit else None
    if share is None:
        return None
    b, head = grain.block or 1, grain.blocks(grain.head)
    cached = r.cached_tokens or 0
    host, device = fill.tiers.host_s or 0.0, fill.tiers.device_s or 0.0
    recompute = grain.prefill_s(cached) - grain.prefill_s(grain.head)
    whole = (r.prompt_tokens or 0) // b - head  # a whole context's blocks past the shared head
    if share >= 1.0 or abs(host - device - recompute) > 0.15 * recompute:  # not a recompute
        return share * whole
    spent, tail = share * (host - device), fill.walk_end == "tail"

    def cost(k: int) -> float:
        if tail:
            return grain.prefill_s(cached) - grain.prefill_s(cached - k)
        return grain.prefill_s(grain.head + k) - grain.prefill_s(grain.head)

    lo, hi = 0, cached - grain.head
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= spent else (lo, mid)
    return lo / b


async def settle(fill: Fill, lab: Lab, grain: Grain) -> None:
    """While several hypotheses explain every count (orders, ends), read back a context they
    disagree about, or, when none is, first fill one of half a context (which evicts part of
    the next victim: a cache that evicts tails first then serves that one's head, one that
    evicts heads first nothing), and fit again; at most `SETTLE` times."""
    for _ in range(SETTLE):
        if len({(f.policy, f.end) for f in fill.fits}) < 2:
            await narrow(fill, lab, grain)
            return
        models = [[model_of(f, t, fill, lab) for t in {f.low, f.high}] for f in fill.fits]
        only_ends = len({f.policy for f in fill.fits}) == 1
        target = None if only_ends else telling_read(fill, grain, models)
        nudge = None
        if target is None:  # only a partial eviction tells the ends apart
            nudge = Prompt(((f"h{len(fill.tags)}{fill.salt}",
                             blocks_of(fill.filler // 2 + grain.overhead + 2, grain)),), cap=0)
            for group in models:
                for m in group:
                    m.serve(nudge)
            target = telling_read(fill, grain, models)
        if target is None:
            return
        await read_back(fill, lab, grain, target, nudge)


async def narrow(fill: Fill, lab: Lab, grain: Grain) -> None:
    """One hypothesis whose capacities span more than a block where tails go first: read back
    a context its two ends would serve differently, and fit again; at most `SETTLE` times."""
    for _ in range(SETTLE):
        if len(fill.fits) != 1 or fill.fits[0].end != "tail" or \
                fill.fits[0].high - fill.fits[0].low < 1:
            return
        f = fill.fits[0]
        target = telling_read(fill, grain, [[model_of(f, f.low, fill, lab)],
                                            [model_of(f, f.high, fill, lab)]])
        if target is None:
            return
        await read_back(fill, lab, grain, target, None)


async def read_back(fill: Fill, lab: Lab, grain: Grain, target: str,
                    nudge: Prompt | None) -> None:
    """Fill the half-size `nudge` context (when given), read `target` back, fit again."""
    params = {"order": "given", "context_tokens": fill.filler, "sends": [], "reads": [target],
              "kept": f"{kept_ratio(fill.context, grain):.6f}", "answer_tokens": ANSWER}
    extra: list[Record] = []
    if nudge is not None:
        tag = nudge.units[0][0]
        fill.tags.append(tag)
        half = {**params, "context_tokens": max(1, fill.filler // 2), "sends": [tag],
                "reads": [], "kept": "0.5"}
        extra = await run(fill, lab, grain, half, fill.filler // 2 + grain.overhead + 8)
        fill.records += extra
    back = await run(fill, lab, grain, params, fill.context + 8)
    fill.walk += back
    served = served_so_far(fill, grain)
    before = sum({k: n for p in lab.ledger[:fill.first] for k, n in p.units}.values())
    fill.fits = await asyncio.to_thread(fit_all, lab.ledger, served, fill.guess,
                                        blocks_of(fill.context, grain), fill.device_blocks,
                                        before)


def model_of(f: Fit, total: int, fill: Fill, lab: Lab) -> Cache:
    """Fit `f`'s cache at `total` blocks, having served every request so far."""
    device = total if fill.device_blocks is None else fill.device_blocks
    cache = Cache(Hypothesis(f.policy, f.end, device, max(0, total - device)))
    for p in lab.ledger:
        cache.serve(p)
    return cache


def telling_read(fill: Fill, grain: Grain, models: list[list[Cache]]) -> str | None:
    """The context whose read splits the hypotheses into the most groups that could not be
    served alike whatever capacity each allows (over its models), or None when no read splits
    them at all."""
    unit = blocks_of(fill.context, grain)
    best, most = None, 1
    for tag in fill.tags:
        outcomes = [{sum(m.where(tag, unit)) for m in group} for group in models]
        groups = len(apart(outcomes))
        if groups > most:
            best, most = tag, groups
    return best


def apart(outcomes: list[set]) -> list[set]:
    """The outcome sets merged where they overlap: what a read can tell apart."""
    merged: list[set] = []
    for o in outcomes:
        o = set(o)
        for m in [m for m in merged if m & o]:
            merged.remove(m)
            o |= m
        merged.append(o)
    return merged


def served_so_far(fill: Fill, grain: Grain) -> list[int | None]:
    """What the engine served each request of the ledger, in blocks (None before the capacity
    runs, and where it did not say)."""
    b = grain.block or 1
    return [None] * fill.first + [None if r.cached_tokens is None else r.cached_tokens // b
                                  for r in fill.sent if not r.skipped and r.prompt_tokens]


def beyond_cached(r: Record, grain: Grain) -> float:
    """What a request's uncached last tokens cost, at the cold prefill's price."""
    prompt = r.prompt_tokens or r.planned_prompt_tokens
    return grain.prefill_s(prompt) - grain.prefill_s(min(prompt, r.cached_tokens or 0))


def dead_blocks(fill: Fill, grain: Grain) -> int:
    """The blocks the kept contexts' answers left (one greedy answer per context)."""
    if not fill.kept:
        return 0
    gen = next((r for r in fill.walk if not r.skipped), None)
    return len(fill.kept) * (len(answer_keys(gen, grain, "")) if gen else 0)
