"""Time to realise the text of every prompt of the default agent-sim plan, and the speed per
token against a per-word `random.choice` loop like the original tool's `make_body`.

The issue's bars: every prompt of the default agent-sim plan (3 sessions × (150k main in 5k
steps + 2 × 40k subs + a 2k finalize, a warm-up probe, 3 re-reads and 3 baseline forks), 120
requests, 11.0M prompt tokens) in under 0.5 s with a `RatioSizer`; and at least 5× faster per
token than the per-word loop.

What is timed, each the best and the median of `--repeat` runs:

* realise: a fresh `Realiser(plan, RatioSizer(1.0))`, then `messages(request, replies)` for every
  request in schedule order (replies stand in for the engine's: 64 words each). The realiser
  renders each filler once and reuses it, so later requests of a growing conversation cost only
  their new turn, which is what a prefix cache needs (byte-identical prefixes) and what a run
  does.
* realise + JSON: the same, plus `json.dumps` of each request's messages (what goes on the
  wire).
* filler per token: `synth.filler` for every filler of the plan, once (the unique text), against
  `make_body` for the same number of tokens. The original sized text in characters at 4 per
  token (`make_body(int(tokens / 0.25), salt)`), appending `rng.choice(words)` until the length
  is reached; its vocabulary was ten pangram-style sentences split on spaces.

Usage: python -m bench.realise_speed [--repeat 5] [--check] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.harness import add_json_argument, describe_machine, machine, write_json
from workloadlang import api
from workloadlang.plan import synth
from workloadlang.plan.model import Plan
from workloadlang.plan.realise import RatioSizer, Realiser

TARGET_S, TARGET_SPEEDUP = 0.5, 5.0

# Ten pangram-style sentences, as in the original's vocabulary (punctuation attached).
PANGRAMS = """The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow. The five boxing
wizards jump quickly. Jackdaws love my big sphinx of quartz. Bright vixens jump; dozy fowl
quack. Quick zephyrs blow, vexing daft Jim. Waltz, bad nymph, for quick jigs vex. Glib jocks
quiz nymph to vex dwarf.""".split()


def make_body(chars: int, salt: int) -> str:
    """The original's generator: one `random.choice` per word until `chars` characters."""
    rng = random.Random(7919 + salt)
    words: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(PANGRAMS)
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:chars]


@dataclass
class Reply:
    content: str
    reasoning: str = ""
    completion_tokens: int | None = None


def default_agent_sim() -> Plan:
    source = api.load("agent-sim")
    return api.make_plan(api.parse_checked(source), source, {}, salt="bench")


def timings(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(best, median) seconds of `repeat` runs: the best is the least disturbed by other load."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def realise_all(plan: Plan, replies: dict[str, Reply], dump: bool = False) -> int:
    realiser = Realiser(plan, RatioSizer(1.0))
    chars = 0
    for r in plan.requests:
        msgs = realiser.messages(r, replies)
        if dump:
            chars += len(json.dumps(msgs))
    return chars


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()

    plan = default_agent_sim()
    replies = {r.id: Reply(content=synth.filler("reply", r.id, 64), completion_tokens=64)
               for r in plan.requests}
    fillers = [s for m in plan.messages for s in m.segs if s.kind == "filler"]
    unique_tokens = sum(s.tokens for s in fillers)
    body_chars = realise_all(plan, replies, dump=True)

    t_realise = timings(lambda: realise_all(plan, replies), args.repeat)
    t_json = timings(lambda: realise_all(plan, replies, dump=True), args.repeat)
    t_synth = timings(lambda: [synth.filler(plan.salt, s.key, s.tokens) for s in fillers],
                      args.repeat)
    t_loop = timings(lambda: [make_body(4 * s.tokens, i) for i, s in enumerate(fillers)],
                     args.repeat)

    per_tok = lambda t: 1e9 * t / unique_tokens  # noqa: E731  (ns per token)
    speedup_realise = min(a / b for a, b in zip(t_loop, t_realise))
    speedup_synth = min(a / b for a, b in zip(t_loop, t_synth))
    print(f"{describe_machine(started)} · best and median of {args.repeat}\n")
    print(f"plan: agent-sim defaults, {len(plan.requests)} requests, "
          f"{plan.totals.prompt_tokens:,} prompt tokens, {len(fillers)} fillers "
          f"({unique_tokens:,} unique filler tokens), {body_chars / 1e6:.1f} MB of request JSON\n")
    rows = [
        ("realise every prompt (Realiser, RatioSizer)", t_realise),
        ("  ... and json.dumps each request's messages", t_json),
        ("synth.filler for every filler, once", t_synth),
        ("make_body (per-word random.choice) for the same tokens", t_loop),
    ]
    print(f"{'':<56} {'best':>9} {'median':>9} {'ns/token':>9}")
    for label, (best, med) in rows:
        print(f"{label:<56} {best:8.3f}s {med:8.3f}s {per_tok(best):9.1f}")
    print(f"\nrealise every prompt: {t_realise[1]:.3f} s median (target < {TARGET_S} s): "
          f"{'ok' if t_realise[1] < TARGET_S else 'MISSED'}")
    print(f"per token vs make_body (the lower of best/best and median/median): "
          f"{speedup_realise:.1f}× (whole realise), {speedup_synth:.1f}× (text generation "
          f"alone) (target >= {TARGET_SPEEDUP}×): "
          f"{'ok' if min(speedup_realise, speedup_synth) >= TARGET_SPEEDUP else 'MISSED'}")
    missed = t_realise[1] >= TARGET_S or min(speedup_realise, speedup_synth) < TARGET_SPEEDUP
    write_json(args.json, "realise_speed", args,
               [{"what": label, "best_s": best, "median_s": med, "ns_per_token": per_tok(best)}
                for label, (best, med) in rows], started, requests=len(plan.requests),
               prompt_tokens=plan.totals.prompt_tokens, unique_filler_tokens=unique_tokens,
               speedup_realise=speedup_realise, speedup_synth=speedup_synth, missed=missed)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
