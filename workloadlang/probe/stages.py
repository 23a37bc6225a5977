"""The probe's driver: the experiments in turn, each one's parameters chosen from what the ones
before it found, and the card they make.

Input: an open engine (`api.open_engine`), `ProbeOptions`, a progress callback. Output: the
`card.Card` (every property, every experiment with its params and salt, the cost, the exit
code: 0 done, 4 a budget left something out, 130 interrupted).

Order: granularity (the block size, the cold prefill's price) -> idle lifetime (before the
capacity: a lifetime shorter than filling the cache takes makes the capacity unmeasurable, and
the card says so) -> capacity (device and host, eviction order, restore speeds, the shared
prefix under pressure, integrity) -> abort retention. An experiment the budgets leave out, or
that an earlier one's unknowns make pointless, leaves its properties `not_measured` or
`unknown` with the reason; nothing is guessed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from workloadlang.card import Card, Property
from workloadlang.probe import abort, capacity, capacity_props, granularity, idle, readback
from workloadlang.probe.lab import Lab, OutOfBudget, OutOfTime, ProbeOptions
from workloadlang.results import ExitCode

STAGES = ("granularity", "idle", "capacity", "abort")
OWNS = {"granularity": ("granularity",), "idle": ("idle_lifetime",),
        "capacity": ("device_capacity", "host_capacity", "eviction_order", "restore_speed",
                     "shared_prefix", "integrity"),
        "abort": ("abort_retention",)}


async def probe(engine: Any, options: ProbeOptions,
                progress: Callable[[dict[str, Any]], None] = lambda e: None) -> Card:
    """Run every experiment (see the module). Output: the card. Cancelled (Ctrl-C), it still
    returns the card of what was measured (exit code 130)."""
    card = Card(engine=engine.engine_fields(), options=options_of(options),
                started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    card.properties["slots"] = capacity_props.slots(card.engine)
    lab = Lab(engine, options, progress)
    state: dict[str, Any] = {}
    try:
        for stage in STAGES:
            progress({"stage": stage, "left": STAGES[STAGES.index(stage):],
                      "estimate": estimate(stage, state, options, lab)})
            if stage != "granularity" and "grain" not in state:
                leave_out(card, stage, "the granularity experiment did not run")
                continue
            try:
                await STEPS[stage](lab, card, state, options)
            except (OutOfBudget, OutOfTime) as e:
                leave_out(card, stage, str(e))
    except asyncio.CancelledError:
        card.exit_code = ExitCode.INTERRUPTED
        for stage in STAGES:
            leave_out(card, stage, "interrupted")
    finish(card, lab)
    return card


def finish(card: Card, lab: Lab) -> None:
    """The card's experiments and cost, the naive bisection's cost beside it, the exit code."""
    card.experiments, card.cost = lab.experiments, lab.cost
    device = card.properties.get("device_capacity")
    if device is not None and device.status == "known":
        host = card.properties.get("host_capacity")
        tokens = device.value["tokens"] + (host.value.get("tokens", 0) if host and
                                           host.status == "known" else 0)
        card.cost.naive_bisection_tokens = capacity_props.naive_bisection(
            tokens, device.value["context_tokens"])
    if card.exit_code == ExitCode.OK and card.left_out:
        card.exit_code = ExitCode.INCOMPLETE


def leave_out(card: Card, stage: str, why: str) -> None:
    """The stage's properties not measured yet are not measured, for `why`."""
    missing = [n for n in OWNS[stage] if n not in card.properties]
    for name in missing:
        card.properties[name] = Property(status="not_measured", reason=why, experiment=stage)
    if missing and stage not in card.left_out:
        card.left_out.append(stage)


def options_of(o: ProbeOptions) -> dict[str, Any]:
    return {"budget_tokens": o.budget_tokens, "time_budget_s": o.time_budget_s,
            "idle_gaps_s": list(o.idle_gaps_s), "kv_bytes_per_token": o.kv_bytes_per_token,
            "salt": o.salt}


def estimate(stage: str, state: dict[str, Any], o: ProbeOptions, lab: Lab) -> dict[str, Any]:
    """What is left, as far as is known: the idle waits, and the capacity's and the abort's
    prefill (the capacity's as a share of the cache it measures)."""
    left = STAGES[STAGES.index(stage):]
    out: dict[str, Any] = {"idle_s": sum(o.idle_gaps_s) if "idle" in left else 0.0}
    grain = state.get("grain")
    if "abort" in left and grain is not None:
        tokens, _ = abort.prompt_size(lab, grain)
        out["abort_tokens"] = int(1.5 * tokens)
    if "capacity" in left:
        out["capacity"] = "1.2-1.5x the cache's capacity"
    return out


# ---------------------------------------------------------------- the stages

async def step_granularity(lab: Lab, card: Card, state: dict, o: ProbeOptions) -> None:
    grain, prop = await granularity.measure(lab, f"{o.salt}-g")
    state["grain"] = grain
    card.properties["granularity"] = prop


async def step_idle(lab: Lab, card: Card, state: dict, o: ProbeOptions) -> None:
    card.properties["idle_lifetime"] = await idle.measure(lab, state["grain"], o.idle_gaps_s,
                                                          f"{o.salt}-i")


async def step_capacity(lab: Lab, card: Card, state: dict, o: ProbeOptions) -> None:
    grain = state["grain"]
    if not grain.counts:
        why = ("the engine reports no cached tokens: what each read was served cannot be "
               "counted, and its timings alone cannot place a boundary within a context")
        for name in OWNS["capacity"]:
            card.properties[name] = Property(status="unknown", reason=why,
                                             experiment="capacity")
        return
    fill = await capacity.measure(lab, grain, f"{o.salt}-c")
    device, host = capacity_props.capacities(fill, grain)
    card.properties.update(device_capacity=device, host_capacity=host,
                           eviction_order=capacity_props.eviction_order(fill, grain),
                           restore_speed=capacity_props.restore_speed(fill, grain,
                                                                      o.kv_bytes_per_token),
                           shared_prefix=readback.shared_prefix(fill),
                           integrity=await readback.integrity(fill, lab))
    expired(card, lab)
    if not fill.stopped and fill.budget_bound:  # the budget ran out before the cache did
        card.left_out.append("capacity")


def expired(card: Card, lab: Lab) -> None:
    """When contexts are lost after less idle time than filling the cache took (more than the
    longest gap they survived), the reads may show that lifetime rather than a capacity or an
    eviction order, and which tier a read came from is not sure: the properties read from them
    are unknown, saying so."""
    idle_prop = card.properties.get("idle_lifetime")
    if idle_prop is None or idle_prop.value.get("lost_within_s") is None:
        return
    kept = idle_prop.value.get("survives_s") or 0.0
    took = sum(e.wall_s for e in lab.experiments if e.name == "capacity")
    if took <= kept:
        return
    why = (f"contexts are lost within {idle_prop.value['lost_within_s']:g} s idle and filling "
           f"the cache took {took:.1f} s: what the reads show may be that lifetime, not a "
           "capacity or an eviction order")
    for name in ("device_capacity", "host_capacity", "eviction_order", "shared_prefix",
                 "restore_speed", "integrity"):
        card.properties[name] = Property(status="unknown", reason=why, experiment="capacity")


async def step_abort(lab: Lab, card: Card, state: dict, o: ProbeOptions) -> None:
    card.properties["abort_retention"] = await abort.measure(lab, state["grain"],
                                                             f"{o.salt}-a")


STEPS = {"granularity": step_granularity, "idle": step_idle, "capacity": step_capacity,
         "abort": step_abort}
