"""`wl probe` on a busy machine: ground-truth configurations (one with no host tier whose device
reads a load can make look like host restores, and two with a host tier) probed while processes
spin on the CPU from the middle of the capacity walk on, and no property of any card wrong
(`unknown` only where the card says the load left a tier undecided). `python -m
bench.probe_truth --cpu-load 2` runs every configuration so (docs/probe.md, "On a busy
machine")."""

from __future__ import annotations

import random

import pytest

from bench.probe_truth import Load, check, describe, draw, run

pytestmark = pytest.mark.alone  # its simulators and the load own the CPU meanwhile

SEED, DRAWN = 43, 20
CHOSEN = ("B1 dev24576 host0@0 fifo/head",  # no host tier: none may be named
          "B32 dev12288 host8192@20 lru/tail", "B16 dev20480 host4096@20 lru/tail")


def test_a_loaded_machine_gives_no_wrong_property():
    rng = random.Random(SEED)
    drawn = [draw(rng) for _ in range(DRAWN)]
    configs = [next(c for c in drawn if describe(c).startswith(name)) for name in CHOSEN]
    results = run(configs, len(configs), Load(procs=1, where="walk"))
    wrong = {describe(cfg): [f"{m.prop}: {m.why}" for m in check(cfg, card) if m.wrong]
             for cfg, card, _ in results}
    assert not {k: v for k, v in wrong.items() if v}
    undecided = [m for cfg, card, _ in results for m in check(cfg, card) if not m.wrong]
    assert all("not seen consistently" in m.why for m in undecided), undecided
