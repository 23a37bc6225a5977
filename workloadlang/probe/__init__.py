"""`wl probe`: an engine's cache card, from a short adaptive series of experiments, each an
ordinary bundled `probes/NAME` workload run through the public API (docs/probe.md).

    async with api.open_engine(url) as engine:
        card = await probe(engine, ProbeOptions(budget_tokens=2_000_000))

Input: an open engine and the options. Output: `card.Card`. Modules: `driver` (the order of
the experiments and the card), `lab` (running one experiment, the budgets), one module per
experiment (`granularity`, `capacity` with `capacity_props`, `churn`, `abort`, `idle`), and the
analysis they share: `model` (hypothesis caches), `fit` (fitting them to the counts), `prices`
(device, host or recompute by price).
"""

from workloadlang.probe.lab import ProbeOptions
from workloadlang.probe.stages import probe

__all__ = ["ProbeOptions", "probe"]
