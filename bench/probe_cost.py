"""What `wl probe` costs: the whole card of the simulator's default preset (262,144 device
tokens, no host tier), its wall time, requests and the tokens the engine prefilled, against
what a naive bisection of the capacity one context at a time would prefill.

Each round probes a fresh simulator (its own process, `harness.simulator`) with the default
idle gaps (1 s, 10 s), as `wl probe --sim` does.

Usage: python -m bench.probe_cost [--rounds 3] [--preset default] [--json PATH]
Output: a row per round and one per experiment of the last, and the machine they ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench.harness import add_json_argument, describe_machine, machine, simulator, table, write_json
from workloadlang import api
from workloadlang.probe import ProbeOptions, probe
from workloadlang.sim import PRESETS


async def one(url: str, salt: str) -> tuple[Any, float]:
    async with api.open_engine(url) as engine:
        t0 = time.monotonic()
        card = await probe(engine, ProbeOptions(salt=salt))
        return card, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    add_json_argument(ap)
    args = ap.parse_args(argv)
    started = machine()
    device = PRESETS[args.preset].device_tokens
    rows, card = [], None
    for i in range(args.rounds):
        with simulator("--preset", args.preset) as sim:
            card, secs = asyncio.run(one(sim.base_url, f"cost{i}"))
        c = card.cost
        rows.append({"round": i + 1, "wall_s": secs, "requests": c.requests,
                     "prefilled": c.prefilled_tokens, "x_device": c.prefilled_tokens / device,
                     "naive": c.naive_bisection_tokens,
                     "known": sum(p.status == "known" for p in card.properties.values())})
    print(f"wl probe --sim --sim-preset {args.preset} ({device:,} device tokens), on "
          f"{describe_machine(started)}")
    print(table(rows, [("round", "round", "d"), ("wall_s", "seconds", ".1f"),
                       ("requests", "requests", ",d"), ("prefilled", "prefilled", ",d"),
                       ("x_device", "x device", ".2f"), ("naive", "naive bisection", ",d"),
                       ("known", "known properties", "d")]))
    exp = [{"name": e.name, "requests": e.requests, "prefilled": e.prefilled_tokens,
            "wall_s": e.wall_s} for e in card.experiments] if card else []
    print(table(exp, [("name", "experiment (last round)", "s"), ("requests", "requests", ",d"),
                      ("prefilled", "prefilled", ",d"), ("wall_s", "seconds", ".2f")]))
    write_json(args.json, "probe_cost", args, rows, started, experiments=exp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
