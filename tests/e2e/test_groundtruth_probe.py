"""Ground truth for `wl probe`: simulator configurations drawn from a seed (block size, device
capacity, eviction order and end, a host tier with its restore speed, an idle lifetime, what
cut requests keep, restored contexts corrupted), the probe run against each, and every property
of each card checked against the configuration (`bench.probe_truth`: capacities within one
block, or one context where heads go first; restore speeds within 15 %; order, lifetime
bracket, abort retention and integrity exactly; `unknown` on a decidable property is a miss).
`python -m bench.probe_truth --configs 60` runs more of them (docs/probe.md).

The probes run side by side, so each is a load on the others' clients. A card that says a
property is `unknown` (never one that states a wrong value) is probed again alone, once, and
judged on that card: the experiment repeated where its noise is the test's own, as the probe
would be run for real. A wrong value fails at once; an `unknown` alone fails too."""

from __future__ import annotations

import random

import pytest

from bench.probe_truth import check, describe, draw, run

pytestmark = pytest.mark.alone  # its simulators run side by side and own the CPU meanwhile

CONFIGS, SEED, PARALLEL = 20, 43, 5


def test_every_property_of_every_drawn_configuration_is_right():
    rng = random.Random(SEED)
    configs = [draw(rng) for _ in range(CONFIGS)]
    assert len({describe(c) for c in configs}) == CONFIGS
    results = run(configs, PARALLEL)
    wrong = {describe(cfg): [f"{m.prop}: {m.why}" for m in check(cfg, card) if m.wrong]
             for cfg, card, _ in results}
    assert not {k: v for k, v in wrong.items() if v}
    unsure = [cfg for cfg, card, _ in results if check(cfg, card)]
    again = {describe(cfg): [f"{m.prop}: {m.why}" for m in check(cfg, card)]
             for cfg, card, _ in run(unsure, 1)} if unsure else {}
    assert not {k: v for k, v in again.items() if v}
    assert len(unsure) <= CONFIGS // 4, f"{len(unsure)} of {CONFIGS} probed again alone"
