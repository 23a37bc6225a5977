"""`wl probe`'s ground truth: configurations of the simulator drawn from a seed, the probe run
against each, and every property of each card checked against the configuration.

What is checked (docs/probe.md, "Ground truth"): the block size exactly; the device and host
capacities within one block (an interval holding the truth and no wider than a block and one
answer's blocks, which no read sees), or within one context where the device evicts a
sequence's head first (what is left of a context then cannot be read); the host tier's restore
speed and the cold prefill's speed within 15 %, a host tier that restores no faster than a
recompute named as such; the eviction order and the end of a sequence that goes first; the idle
lifetime's bracket; the shared prefix kept under LRU and lost under FIFO; abort retention (a
cut in the prefill, a cut in the decode) and integrity (identical, or the position a corrupted
restore diverges at) exactly. A property reported `unknown` that the configuration makes
decidable is a miss; the capacity (and what is read from the same reads: order, restore speed,
integrity) is not decidable when the longest idle gap a lifetime outlasts is shorter than
filling the cache took, nor what a cut kept when the lifetime is shorter than the time to its
re-send.

Usage: python -m bench.probe_truth [--configs 24] [--seed 43] [--parallel 4]
                                  [--cpu-load N] [--load-over walk|all]
                                  [--only PREFIX] [--times N] [--json PATH]
`--cpu-load N`: N processes that spin per probe, from the capacity walk's 8th read on (a load
that starts among the reads the tiers are told apart by) or over the whole probe.
Output: a line per configuration and property missed (`unknown` where the card said so), the
configurations right in every property, with an unknown and nothing wrong, and with a wrong
property, and the machine it ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.harness import ROOT, add_json_argument, describe_machine, machine, write_json
from workloadlang import api
from workloadlang.card import Card
from workloadlang.probe import ProbeOptions, probe
from workloadlang.sim import SimConfig, start_in_process
from workloadlang.sim.timing import prefill_seconds

sys.path.insert(0, str(ROOT / "tests"))  # the tests' CPU load helper
from cpuload import start_load, stop_load  # noqa: E402

GAPS = (0.3, 1.2)  # the idle gaps the probe tries: a lifetime between them is bracketed
SPEED_TOLERANCE = 0.15
ANSWER_TOKENS = 16  # each capacity request's answer (probe.capacity.ANSWER)


def draw(rng: random.Random) -> SimConfig:
    """One configuration: block size, device capacity, eviction order and end, a host tier
    (behind an LRU device) with its restore speed or none, an idle lifetime, what cut requests
    keep, and the fault that corrupts restored contexts."""
    eviction = rng.choice(["lru", "lru", "fifo", "lfu"])
    host = rng.choice([0, 4096, 8192]) if eviction == "lru" else 0
    faults = []
    if host and rng.random() < 0.4:
        faults.append(f"corrupt_restored={rng.randrange(0, 12)}")
    if host and rng.random() < 0.15:
        faults.append("degraded_host")
    # a prefill that grows fast with the position: contexts of 1k are cheap to fill, the
    # 16k prompt the abort experiment cuts takes a few hundred ms
    return SimConfig(
        max_model_len=16384, block_size=rng.choice([1, 4, 16, 16, 32]),
        device_tokens=rng.choice([12288, 16384, 20480, 24576]), eviction=eviction,
        evict_first=rng.choice(["tail", "head"]), host_tokens=host,
        host_restore_us_per_token=rng.choice([10.0, 20.0, 40.0]) if host else 0.0,
        prefill_us_per_token=rng.choice([4.0, 6.0]), prefill_ctx_scale=2048,
        decode_us_per_token=100.0,
        idle_ttl_s=rng.choice([0.0, 0.0, 0.0, 0.6]),
        prefill_abort=rng.choice(["drop", "keep"]),
        decode_abort=rng.choice(["keep", "prompt", "drop"]),
    ).with_faults(*faults)


@dataclass
class Miss:
    """A property missed: `wrong` when the card states a value the configuration contradicts
    (else it said `unknown`, or left the property out)."""

    prop: str
    why: str
    wrong: bool = True


def check(cfg: SimConfig, card: Card) -> list[Miss]:
    """Every property of `card` against `cfg` (see the module). Output: the misses."""
    misses: list[Miss] = []
    p = card.properties

    def known(name: str) -> dict[str, Any] | None:
        prop = p.get(name)
        if prop is None or prop.status != "known":
            misses.append(Miss(name, f"{prop.status if prop else 'absent'}: "
                                     f"{prop.reason if prop else ''}", wrong=False))
            return None
        return prop.value

    g = known("granularity")
    if g is not None and g["block_tokens"] != cfg.block_size:
        misses.append(Miss("granularity", f"block {g['block_tokens']} != {cfg.block_size}"))
    # with an idle lifetime, the capacity is decided only when a gap the lifetime outlasts
    # is longer than filling the cache took (else no probe can tell expiry from eviction)
    outlasted = max((g for g in GAPS if g < cfg.idle_ttl_s), default=0.0)
    capacity_decidable = not cfg.idle_ttl_s or outlasted > capacity_time(card)
    if capacity_decidable:
        check_capacities(cfg, card, known, misses)
        check_order(cfg, known, misses)
        check_speeds(cfg, card, known, misses)
    check_idle(cfg, known, misses)
    check_abort(cfg, known, misses)
    check_integrity(cfg, card, known, misses, capacity_decidable)
    return misses


def capacity_time(card: Card) -> float:
    return sum(e.wall_s for e in card.experiments if e.name == "capacity")


def check_capacities(cfg: SimConfig, card: Card, known, misses: list[Miss]) -> None:
    """Within a block where tails go first: the card's interval holds the truth, and spans no
    more than a block and the blocks of one answer (an answer's blocks follow its prompt, and
    which of them a cache dropped no read can see); within a context where heads go first."""
    context = card.prop("device_capacity").value.get("context_tokens", 0)
    answer = ANSWER_TOKENS + 2 * cfg.block_size
    for name, truth in (("device_capacity", cfg.device_tokens),
                        ("host_capacity", cfg.host_tokens)):
        v = known(name)
        if v is None:
            continue
        lo, hi = v.get("low", v["tokens"]), v.get("high", v["tokens"])
        if cfg.evict_first == "tail":
            ok = lo - cfg.block_size <= truth <= hi + cfg.block_size and hi - lo <= answer
        else:
            ok = abs(v["tokens"] - truth) <= context and lo - context <= truth <= hi + context
        if not ok:
            misses.append(Miss(name, f"{v['tokens']:,} ({lo:,}-{hi:,}) for {truth:,}"))
    v = known("shared_prefix")  # LRU keeps what is used every round, FIFO loses what came
    # first; under LFU it depends on how its hits compare with the others' (no rule to check)
    if v is not None and cfg.eviction != "lfu" and v["kept"] != (cfg.eviction == "lru"):
        misses.append(Miss("shared_prefix", f"kept {v['kept']} under {cfg.eviction}"))


def check_order(cfg: SimConfig, known, misses: list[Miss]) -> None:
    v = known("eviction_order")
    if v is not None and (v["policy"], v["evicts_first"]) != (cfg.eviction, cfg.evict_first):
        misses.append(Miss("eviction_order", f"{v['policy']}/{v['evicts_first']} for "
                                             f"{cfg.eviction}/{cfg.evict_first}"))


def check_speeds(cfg: SimConfig, card: Card, known, misses: list[Miss]) -> None:
    v = known("restore_speed")
    if v is None:
        return
    cached = v["tokens"]
    cold = cached / prefill_seconds(0, cached, cfg.prefill_us_per_token, cfg.prefill_ctx_scale)
    if not close(v["cold_tps"], cold):
        misses.append(Miss("restore_speed", f"cold {v['cold_tps']} for {cold:.0f}"))
    degraded = any(f.name == "degraded_host" for f in cfg.faults)
    if cfg.host_tokens and v.get("host_doubt"):  # the card says it did not decide the host
        misses.append(Miss("restore_speed", f"host not decided: {v['host_doubt']}", False))
    elif cfg.host_tokens:
        truth = cold if degraded else 1e6 / cfg.host_restore_us_per_token
        if not close(v["host_tps"], truth):
            misses.append(Miss("restore_speed", f"host {v['host_tps']} for {truth:.0f}"))
        slower = not v["host_faster_than_recompute"]
        if slower != (degraded or truth <= 1.1 * cold):
            misses.append(Miss("restore_speed", f"host no faster than recompute: {slower}"))


def close(got: float | None, truth: float) -> bool:
    return got is not None and abs(got - truth) <= SPEED_TOLERANCE * truth


def check_idle(cfg: SimConfig, known, misses: list[Miss]) -> None:
    v = known("idle_lifetime")
    if v is None:
        return
    lost = v["lost_within_s"]
    if not cfg.idle_ttl_s or cfg.idle_ttl_s > max(GAPS):
        ok = lost is None
    else:
        below = max((g for g in GAPS if g < cfg.idle_ttl_s), default=0.0)
        above = min(g for g in GAPS if g > cfg.idle_ttl_s)
        ok = lost == above and (v["survives_s"] or 0.0) == below
    if not ok:
        misses.append(Miss("idle_lifetime", f"{v} for a lifetime of {cfg.idle_ttl_s} s"))


def check_abort(cfg: SimConfig, known, misses: list[Miss]) -> None:
    v = known("abort_retention")
    if v is None:
        return
    prefill = (v.get("prefill_cut") or {}).get("verdict")
    # what a cut prefill kept is read back in the next run: an idle lifetime shorter than the
    # time between them loses it (not decidable then)
    if not (cfg.idle_ttl_s and cfg.prefill_abort == "keep") and \
            prefill != {"drop": "none", "keep": "partial"}[cfg.prefill_abort]:
        misses.append(Miss("abort_retention", f"prefill cut {prefill} for "
                                              f"{cfg.prefill_abort}"))
    decode = (v.get("decode_cut") or {}).get("verdict")  # read back after a settle of 0.5 s
    if not (cfg.idle_ttl_s and cfg.idle_ttl_s < 1.0) and \
            decode != {"keep": "all", "prompt": "prompt", "drop": "none"}[cfg.decode_abort]:
        misses.append(Miss("abort_retention", f"decode cut {decode} for {cfg.decode_abort}"))


def check_integrity(cfg: SimConfig, card: Card, known, misses: list[Miss],
                    decidable: bool) -> None:
    if not decidable:  # which tier a read came from is read from the same prices
        return
    v = known("integrity")
    if v is None:
        return
    if not v["device"]["identical"]:
        misses.append(Miss("integrity", f"device {v['device']}"))
    corrupt = next((f for f in cfg.faults if f.name == "corrupt_restored"), None)
    if not cfg.host_tokens:
        return
    host = v.get("host")
    want = None if corrupt is None else int(corrupt.value or 0)
    got = None if host is None or host["identical"] else host["diverges_at"]
    if host is None or got != want:
        # no read placed in a host tier the card did not decide is a gap, not a wrong answer
        undecided = host is None and "host tier not decided" in card.prop("restore_speed").summary
        misses.append(Miss("integrity", f"host {host} for corrupt_restored={want}"
                           + (" (a host tier not seen consistently)" if undecided else ""),
                           not undecided))


@dataclass(frozen=True)
class Load:
    """A real CPU load on the machine while a probe runs: `procs` spinning processes per probe,
    over `where`: "all" (the whole probe) or "walk" (from the `STEP_AT`th read of the capacity
    walk to the end: a load that starts between the reads the tiers are told apart by, the
    harshest for their prices)."""

    procs: int = 0
    where: str = "walk"


STEP_AT = 8  # the capacity walk's read at which a "walk" load starts


async def one(cfg: SimConfig, load: Load = Load()) -> tuple[Card, float]:
    """The probe against a simulator of `cfg` in its own process, under `load`. Output: the
    card, seconds."""
    pids: list[int] = start_load(load.procs) if load.where == "all" else []
    reads = [0]

    def progress(event: dict[str, Any]) -> None:
        if load.procs and not pids and event.get("experiment") == "capacity" and \
                "read" in str(event.get("record", "")):
            reads[0] += 1
            if reads[0] >= STEP_AT:
                pids.extend(start_load(load.procs))

    try:
        with start_in_process(cfg) as sim:
            async with api.open_engine(sim.base_url) as engine:
                t0 = time.monotonic()
                card = await probe(engine, ProbeOptions(idle_gaps_s=GAPS, salt="truth"),
                                   progress)
                return card, time.monotonic() - t0
    finally:
        stop_load(pids)


def probe_one(cfg: SimConfig, load: Load = Load()) -> tuple[SimConfig, Card, float]:
    """`one` in a process of its own (so no probe's fitting holds up another's timing)."""
    card, secs = asyncio.run(one(cfg, load))
    return cfg, card, secs


def run(configs: list[SimConfig], parallel: int,
        load: Load = Load()) -> list[tuple[SimConfig, Card, float]]:
    """Every configuration's card, in the order of `configs`, `parallel` processes (each with
    its simulator, and its share of `load`) at a time. The longest probes start first (`dearest`),
    so that none begins when the others are done and leaves the machine idle but for it."""
    from concurrent.futures import ProcessPoolExecutor

    first = sorted(range(len(configs)), key=lambda i: dearest(configs[i]))
    with ProcessPoolExecutor(max_workers=parallel) as pool:
        futures = {i: pool.submit(probe_one, configs[i], load) for i in first}
        return [futures[i].result() for i in range(len(configs))]


def dearest(cfg: SimConfig) -> tuple[int, bool]:
    """A probe's place in a queue, dearest first: its fit simulates every block, so the
    smaller the blocks the longer it takes, and a host tier fits twice."""
    return cfg.block_size, not cfg.host_tokens


def describe(cfg: SimConfig) -> str:
    faults = ",".join(f.render() for f in cfg.faults)
    return (f"B{cfg.block_size} dev{cfg.device_tokens} host{cfg.host_tokens}"
            f"@{cfg.host_restore_us_per_token:g} {cfg.eviction}/{cfg.evict_first} "
            f"ttl{cfg.idle_ttl_s:g} abort {cfg.prefill_abort}/{cfg.decode_abort} {faults}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=24)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--cpu-load", type=int, default=0, metavar="N",
                    help="N spinning processes per probe (a real CPU load; default none)")
    ap.add_argument("--load-over", choices=("walk", "all"), default="walk",
                    help="walk: from the capacity walk's 8th read on; all: the whole probe")
    ap.add_argument("--only", metavar="PREFIX", help="only the drawn configurations whose "
                    "description starts so (e.g. \"B1 dev12288 host0@0 lfu/tail\")")
    ap.add_argument("--times", type=int, default=1, help="run each configuration this often")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    rng = random.Random(args.seed)
    configs = [c for c in (draw(rng) for _ in range(args.configs))
               if not args.only or describe(c).startswith(args.only)] * max(1, args.times)
    t0 = time.monotonic()
    results = run(configs, args.parallel, Load(args.cpu_load, args.load_over))
    counts, rows = {"right": 0, "unknown": 0, "wrong": 0}, []
    for cfg, card, secs in results:
        misses = check(cfg, card)
        verdict = "wrong" if any(m.wrong for m in misses) else "unknown" if misses else "right"
        counts[verdict] += 1
        rows.append({"config": describe(cfg), "seconds": secs, "verdict": verdict,
                     "misses": [f"{m.prop}: {m.why}" for m in misses]})
        print(f"{ {'right': 'ok  ', 'unknown': 'UNKN', 'wrong': 'MISS'}[verdict]} {secs:5.1f}s "
              f"{describe(cfg)}")
        for m in misses:
            print(f"       {m.prop}{'' if m.wrong else ' (unknown)'}: {m.why}")
    load = (f"under {args.cpu_load} spinning process(es) per probe over "
            f"{'the capacity walk' if args.load_over == 'walk' else 'the whole probe'}"
            if args.cpu_load else "without an added load")
    print(f"{counts['right']}/{len(results)} configurations right in every property, "
          f"{counts['unknown']} with an unknown and nothing wrong, {counts['wrong']} with a "
          f"wrong property; {load}; {time.monotonic() - t0:.0f} s, on "
          f"{describe_machine(started)}")
    write_json(args.json, "probe_truth", args, rows, started)
    return 1 if counts["right"] < len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
