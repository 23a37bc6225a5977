"""Prices: telling a device hit, a host restore and a recompute apart by what they cost, and
the speed of each, measured like with like.

Input: reads that were served whole (the same prompt size each, timed alone), the cold sends
of the same prompts, and the cold prefill's price from the granularity experiment. Output:
`Tiers`: which reads came from the device and which from a slower tier (the host), the time of
each, and the restore speeds per tier in tokens per second (`speeds`).

A read's time is the engine's own prefill time when it reports one that tells the tiers apart
(the simulator's and llama.cpp's `timings.prompt_ms`), else the client's TTFT: llama.cpp's
prefill time leaves out a restore from its host-RAM prompt cache, which the TTFT holds. Each
read is taken against its repeat sent right after it (a device read of the same prompt in the
same stretch), so a load that slowed both cancels out. Two groups are told apart when the gap
between them is several times the spread within the faster one; what costs between the two is
a read split between the tiers. A slower group counts as a tier only when it is seen
consistently (`doubt`): by the TTFT alone, only for an engine that reports no prefill time of
its own; else the tiers say why, and name none. The cold prefill is priced by the
engine's own prefill time wherever it reports one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from workloadlang.results import Record

MIN_GAP_S = {"server": 0.00001, "ttft": 0.0005}
"""Below this, two times are the same price: the resolution of the engine's own prefill time
(milliseconds with decimals), and of a TTFT (the client's wake-ups, the network)."""
SEPARATION = 4.0  # the gap between the groups, in spreads of the faster one
MIN_SLOW_READS = 2  # reads a slower tier is seen in, unless its price is beyond all noise
NOISE_MARGIN = 2.0  # beyond all noise: this many times the largest device read's deviation


@dataclass
class Tiers:
    """See the module. `signal`: "server" or "ttft"; `device_s` / `host_s`: the median time of
    a read from each (None: no slower group); `tier`: per read id "device", "host" or "split";
    `restored`: per read id the share of its cached tokens that came from the host; `doubt`: why
    a slower group of reads was not taken for a tier (the card then names no tier either)."""

    signal: str = "ttft"
    tail: Callable[[Record], float] = lambda r: 0.0  # a read's cost beyond its cached part
    fixed: float = 0.0  # what any request costs besides its prefill (in a TTFT only)
    device_s: float | None = None
    host_s: float | None = None
    spread_s: float = 0.0
    tier: dict[str, str] = field(default_factory=dict)
    restored: dict[str, float] = field(default_factory=dict)
    doubt: str | None = None  # why a slower group seen was not taken for a tier

    @property
    def host(self) -> bool:
        return self.host_s is not None

    def time(self, r: Record) -> float | None:
        """What read `r` took for its cached part: its time by the signal, less what its
        uncached last tokens cost (reads of one size differ by a few of those)."""
        t = time_of(r, self.signal)
        if t is None:
            return None
        return t - self.tail(r) - (self.fixed if self.signal == "ttft" else 0.0)


def time_of(r: Record, signal: str) -> float | None:
    if signal == "server":
        return None if r.server_prefill_ms is None else r.server_prefill_ms / 1000
    return r.ttft_s


def classify(walk: list[Record], refs: Mapping[str, Record] | None = None,
             others: Sequence[Record] = (),
             tail: Callable[[Record], float] = lambda r: 0.0, fixed: float = 0.0) -> Tiers:
    """Which tier served each read (see the module). `walk`: reads served whole in the order
    of a walk from the last victim to the first, so a slower tier's reads come after every
    device read: two groups count only when they fall that way (a lone slow read among fast
    ones is noise, not a tier). `refs`: per read id its repeat (`referenced`). By the engine's
    prefill time when it shows two such groups, else by the TTFT when it shows them
    consistently and the engine reports no prefill time (`doubt`); `others` are placed in the groups found. `tail`: a read's cost
    beyond its cached part, and `fixed`: a request's cost besides its prefill, taken off its
    time."""
    best = Tiers(tail=tail, fixed=fixed)
    flat_server = False
    for signal in ("server", "ttft"):
        probe = Tiers(signal=signal, tail=tail, fixed=fixed)
        times = referenced(walk, refs or {}, probe)
        if times is None:
            continue
        tiers = split(times, probe)
        if tiers.host and not in_order(walk, tiers):
            tiers = split(times, probe, one=True)
        why = doubt(walk, times, tiers, strict=flat_server) if tiers.host else None
        if why:
            tiers = split(times, probe, one=True)
            tiers.doubt = why
        if tiers.host or best.device_s is None:
            best = tiers
        elif why and not best.doubt:
            best.doubt = why
        if tiers.host:
            break
        flat_server = flat_server or signal == "server"
    for r in others:
        t = best.time(r)
        if t is not None and r.id not in best.tier:
            best.tier[r.id], best.restored[r.id] = place(t, best)
    for r in walk:  # a read's repeat came from the device, whatever its own time
        if r.id in (refs or {}):
            ref = (refs or {})[r.id]
            best.tier[ref.id], best.restored[ref.id] = "device", 0.0
    return best


def referenced(walk: list[Record], refs: Mapping[str, Record],
               probe: Tiers) -> dict[str, float] | None:
    """Each read's time by `probe`'s signal, taken against its reference: its time less its
    repeat's, over the median of the repeats' times (a load that slowed a read and its repeat
    alike cancels out). A read without a repeat keeps its own time. None when a time is
    missing."""
    times = {r.id: probe.time(r) for r in walk}
    ref_times = {rid: probe.time(refs[rid]) for rid in times if rid in refs}
    if not times or any(t is None for t in times.values()):
        return None
    known = [t for t in ref_times.values() if t is not None]
    if not known:
        return times  # type: ignore[return-value]
    base = statistics.median(known)
    return {rid: t if ref_times.get(rid) is None else base + t - ref_times[rid]  # type: ignore
            for rid, t in times.items()}


def doubt(walk: list[Record], times: dict[str, float], tiers: Tiers,
          strict: bool) -> str | None:
    """Why a slower group is not a tier seen consistently (None when it is): it must hold
    several reads, or one read whose excess is well beyond every device read's deviation from
    the device's median (the noise measured in the same walk). `strict`: the engine's own
    prefill time showed no slower group, so one the TTFT alone shows is never named (an engine
    whose prefill time leaves a restore out, as llama.cpp's does, and a load that slowed the
    client are not told apart)."""
    device = [t for rid, t in times.items() if tiers.tier.get(rid) == "device"]
    slow = [t for rid, t in times.items() if tiers.tier.get(rid) != "device"]
    if not device or not slow or tiers.device_s is None:
        return None
    noise = max(abs(t - tiers.device_s) for t in device)
    excess = min(slow) - tiers.device_s
    if not strict and (len(slow) >= MIN_SLOW_READS or excess > NOISE_MARGIN * noise):
        return None
    timer = "engine's prefill time" if tiers.signal == "server" else "TTFT"
    seen = (f"{len(slow)} read(s) at the end of the walk cost {excess * 1e3:.2f} ms or more "
            f"over a device read by the {timer}, where device reads varied by up to "
            f"{noise * 1e3:.2f} ms")
    if strict:
        return (f"{seen}, and the engine's own prefill time showed no slower tier: a tier "
                "restoring outside that time and a load that slowed the client are not told "
                "apart, so a slower tier is not seen consistently")
    return f"{seen}: a slower tier is not seen consistently"


def in_order(walk: list[Record], tiers: Tiers) -> bool:
    """True when no read after the first slower one is a device read."""
    seen_slow = False
    for r in walk:
        slow = tiers.tier.get(r.id) != "device"
        if seen_slow and not slow:
            return False
        seen_slow = seen_slow or slow
    return True


def split(times: dict[str, float], like: Tiers, one: bool = False) -> Tiers:
    """Two price groups in `times` (measured as `like` measures), when there are two (see the
    module); `one`: take them as one group."""
    signal = like.signal
    ordered = sorted(times.values())
    gaps = [(b - a, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:]))]
    low = ordered
    if gaps and not one:
        gap, i = max(gaps)
        spread = mad(ordered[: i + 1])
        if gap > max(MIN_GAP_S[signal], SEPARATION * spread,
                     0.1 * statistics.median(ordered[: i + 1])):
            low = ordered[: i + 1]
    device = statistics.median(low)
    spread = mad(low)
    tiers = Tiers(signal=signal, tail=like.tail, fixed=like.fixed, device_s=device,
                  spread_s=spread)
    slow = [t for t in ordered if t > low[-1]]
    if slow:
        tiers.host_s = statistics.median(top_group(slow, spread, MIN_GAP_S[signal]))
    for rid, t in times.items():
        tiers.tier[rid], tiers.restored[rid] = place(t, tiers)
    return tiers


def top_group(slow: list[float], spread: float, floor: float) -> list[float]:
    """The slowest reads that cost about the same: whole contexts from the host, without the
    reads split between the tiers below them."""
    top = slow[-1]
    return [t for t in slow if top - t <= max(floor, SEPARATION * spread, 0.1 * top)]


def place(t: float, tiers: Tiers) -> tuple[str, float]:
    """A read's tier and the share of it restored from the host."""
    if tiers.host_s is None or tiers.device_s is None:
        return "device", 0.0
    share = (t - tiers.device_s) / max(1e-9, tiers.host_s - tiers.device_s)
    share = min(1.0, max(0.0, share))
    noise = floor_of(tiers)
    if t - tiers.device_s <= noise:
        return "device", 0.0
    if tiers.host_s - t <= max(noise, 0.1 * tiers.host_s):
        return "host", 1.0
    return "split", share


def floor_of(tiers: Tiers) -> float:
    """The least difference of time the tiers' signal tells from noise."""
    return max(MIN_GAP_S[tiers.signal], SEPARATION * tiers.spread_s)


def mad(xs: list[float]) -> float:
    """The median absolute deviation (the spread of a group, robust to one odd time)."""
    if len(xs) < 2:
        return 0.0
    m = statistics.median(xs)
    return statistics.median(abs(x - m) for x in xs)


@dataclass
class Speeds:
    """Tokens per second of serving a context's cached part: cold (a prefill of it), from the
    device, from the host (None: not measured); `device_bound`: the device was faster than the
    timing resolves (its figure is a lower bound)."""

    cold: float | None = None
    device: float | None = None
    host: float | None = None
    device_bound: bool = False
    cold_signal: str = "ttft"  # what the cold prefill was timed by (`cold_signal`)


def speeds(tiers: Tiers, cold: list[Record], cached: int, tail_s: float) -> Speeds:
    """The speeds (see `Speeds`) for a context whose cached part is `cached` tokens, each over
    its time beyond what its uncached last tokens cost (`Tiers.time`; for a cold send,
    `tail_s`: what those tokens cost a read that is served the rest)."""
    out = Speeds()
    signal = out.cold_signal = cold_signal(tiers, cold)
    fixed = tiers.fixed if signal == "ttft" else 0.0
    cold_times = [t - fixed - tail_s for t in (time_of(r, signal) for r in cold)
                  if t is not None]
    if cold_times:
        out.cold = rate(cached, statistics.median(cold_times))
    if tiers.device_s is not None:
        floor = floor_of(tiers)
        out.device_bound = tiers.device_s <= floor
        out.device = rate(cached, max(tiers.device_s, floor))
    if tiers.host_s is not None:
        out.host = rate(cached, tiers.host_s)
    return out


def cold_signal(tiers: Tiers, cold: list[Record]) -> str:
    """The time a cold prefill is priced by: the engine's own prefill time when it reports one
    for every cold send (a cold send restores nothing, so that time holds its whole prefill
    and none of the client's wake-ups), else the tiers' signal."""
    if cold and all(r.server_prefill_ms for r in cold):
        return "server"
    return tiers.signal


def rate(tokens: int, seconds: float) -> float | None:
    return tokens / seconds if seconds > 0 else None
