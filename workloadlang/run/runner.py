"""One run against an engine: calibrate, execute the plan, read the engine's counters around it.

Input: a `Plan`, an `EngineLink` (the discovered engine and the connections to it) and a
`Sink` (records as they complete, events). Output: `Measured`: every record and what the run
measured besides (calibration, the engine's counters, the client's health, why it is
incomplete). No verdicts: the gates judge what was measured (`api.run_workload`).

Cancellation (Ctrl-C) still gives what was measured: the requests in flight are recorded as
`interrupted`, the rest as not run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from workloadlang.diagnostics import WorkloadError
from workloadlang.evaluate import TIMING_TOKENS, Value, evaluate, is_number
from workloadlang.plan.draws import fresh_salt
from workloadlang.plan.model import Plan
from workloadlang.plan.realise import Realiser, Sizer
from workloadlang.results import Record, Sink
from workloadlang.resultsmodels import Calibration, ClientHealth, MetricsSummary, ParamValue
from workloadlang.run import calibrate, metrics
from workloadlang.run.executor import Executor
from workloadlang.run.executor import Shared as ExecutorShared
from workloadlang.run.link import EngineLink
from workloadlang.run.record import (
    REREAD_UNCACHED,
    TtftReference,
    decisive_prompt,
    too_few_to_price,
)
from workloadlang.run.runoptions import RunOptions
from workloadlang.selector import gate_metric_refs, select_static


@dataclass
class Measured:
    """What one run measured (see the module); `env` is what the gates read of calibration."""

    records: list[Record]
    started_at: str
    elapsed_s: float
    calibration: Calibration
    env: dict[str, ParamValue]
    metrics: MetricsSummary
    client: ClientHealth
    incomplete: str | None
    interrupted: bool
    plan: Plan | None = None  # the plan run, when the calibration had it made again


async def measure(plan: Plan, link: EngineLink, sink: Sink,
                  options: RunOptions = RunOptions(), shared: Shared | None = None) -> Measured:
    """Calibrate, execute and read the counters (see the module), as `options` say. With
    `shared`, this is one shard of a run sharded over processes (`workloadlang.scale`): the
    driver made the run's events and its calibration (`options.calibration`) and reads the
    counters at the run-wide barriers, which each phase barrier here waits for."""
    if not options.isolation:
        plan = without_isolation(plan)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if shared is None:
        plan_event(plan, link, sink)
    snaps: list[dict[str, Any]] = []
    cal, run, interrupted, executor = calibrate.Calibration(), None, False, None
    t0 = time.perf_counter()
    try:
        cal, sizer, ref = await calibration(plan, link, sink, options.calibration)
        plan = resized(plan, cal, options, link, sink) if shared is None else plan
        if shared is None:
            await snapshot(link, "start", snaps, sink)

        async def on_phase(k: int) -> None:
            if shared is not None:
                await shared.barrier(k)
            elif k > 0:
                await snapshot(link, f"after {plan.phases[k - 1]}", snaps, sink)

        executor = Executor(plan, Realiser(plan, sizer), link.pacing(), link.endpoint, sink,
                            ref=ref, on_phase=on_phase, time_budget_s=options.time_budget_s,
                            prefill_own=link.info.prefill_own, on_alone=link.alone,
                            sessions=options.sessions, start_at=start_on_clock(options),
                            shared=shared, measure_again=options.measure_again)
        run = await executor.run()
        if shared is None:
            await snapshot(link, "end", snaps, sink)
    except asyncio.CancelledError:
        interrupted = True
        if executor is not None:
            executor.fill_unrun()
            run = executor.result(incomplete="interrupted")
    records = run.records if run else []
    return Measured(records=records, started_at=started,
                    elapsed_s=run.elapsed_s if run else time.perf_counter() - t0,
                    calibration=cal.model_copy(deep=True), env=calibration_env(cal),
                    metrics=metrics_summary(snaps, records, run.client if run else {}),
                    client=ClientHealth.model_validate(run.client if run else {}),
                    incomplete=run.incomplete if run else "not started",
                    interrupted=interrupted, plan=plan)


class Shared(ExecutorShared, Protocol):
    """A shard's link to the rest of its run (`measure`'s `shared`)."""

    async def barrier(self, k: int) -> None:
        """Barrier k is open in this shard: returns when it is open in every shard."""


def plan_event(plan: Plan, link: EngineLink, sink: Sink, **more: Any) -> None:
    """The run's first event: the plan and the engine (`more`: what the caller adds)."""
    sink.event("plan", {"workload": plan.workload, "plan_hash": plan.plan_hash, "salt": plan.salt,
                        "params": plan.params, "requests": len(plan.requests),
                        "engine": link.engine_fields(), **more})


async def calibration(plan: Plan, link: EngineLink, sink: Sink,
                      given: calibrate.Calibration | None = None
                      ) -> tuple[calibrate.Calibration, Sizer, TtftReference]:
    """Output: how to size text and the TTFT reference: measured against the engine (the
    `calibration` event), or made again from a calibration `given` (a shard of a run uses its
    driver's: the same sizer, so the same requests, and no request sent)."""
    if given is not None:
        return given, calibrate.sizer_of(given, link.tokenizer, plan.salt), reference(given)
    cal = calibrate.Calibration()
    sizer = await calibrate.sizer_for(link.chat, link.endpoint, link.tokenizer, plan.salt, cal)
    link.alone(True)  # calibration sends one request at a time: read its stamps at once
    try:
        # the calibration twins' salt is fresh every run: a replayed run (`--salt S`) against
        # a warm server must not find its "cold" twin already cached
        ref = await threshold_reference(plan, link, sizer, cal, fresh_salt(6))
    finally:
        link.alone(False)
    sink.event("calibration", cal.model_dump())
    return cal, sizer, ref


SPEED_LIMIT = 65536
"""The largest cold prompt the calibration sends to time a cold prefill (and half the context
limit at most)."""
def timing_tokens(cal: calibrate.Calibration, max_context: int | None = None) -> int:
    """Output: `$timing_tokens`, the least prompt whose re-read timing tells a cache hit from a
    recompute on this engine (`record.decisive_prompt` at the calibrated cold speed, over the
    engine's own prefill time when it reports one), at most three quarters of `max_context`;
    0 without a cold speed."""
    need = decisive_prompt(REREAD_UNCACHED, reference(cal), server=bool(cal.hit_prefill_s))
    if need is None:
        return 0
    return need if max_context is None else min(need, max_context * 3 // 4)


def resized(plan: Plan, cal: calibrate.Calibration, options: RunOptions, link: EngineLink,
            sink: Sink) -> Plan:
    """Output: the plan to run: made again (`options.replan`) with what the calibration learnt
    (`$timing_tokens`) when that changes it (a `plan` event and a note say so), else `plan`.
    Before any session starts, a note names the re-reads whose timing cannot tell a hit from
    a recompute at their size here, and the size that would."""
    env = {TIMING_TOKENS: timing_tokens(cal, link.info.max_context)}
    if options.replan is not None and env[TIMING_TOKENS]:
        try:
            again = options.replan(env)
        except WorkloadError as e:
            sink.event("note", {"message": "the plan could not be sized for this engine "
                                f"(`$timing_tokens` {env[TIMING_TOKENS]:,}): "
                                f"{e.diagnostics[0].message}; it runs as planned"})
            again = plan
        again = again if options.isolation else without_isolation(again)
        if again.plan_hash != plan.plan_hash:
            plan = again
            plan_event(plan, link, sink, sized=env)
            sink.event("note", {"message": f"sized for this engine: `$timing_tokens` "
                                f"{env[TIMING_TOKENS]:,} (plan {plan.plan_hash[:16]})"})
    for note in too_small_notes(plan, cal):
        sink.event("note", {"message": note})
    return plan


def too_small_notes(plan: Plan, cal: calibrate.Calibration) -> list[str]:
    """Output: for each fail gate that reads whether timing backs a reported hit (`ttft_agrees`,
    `ttft_disagrees`) of re-reads (probes of a context they expect cached) too small for
    timing to tell a hit from a recompute here, what they need."""
    need, out = timing_tokens(cal), []
    if not need and cal.too_quick_tokens:
        return [f"`{gp.gate.name}` cannot tell a cache hit from a recompute on this engine: a "
                f"cold prefill of {cal.too_quick_tokens:,} tokens (the largest the calibration "
                "timed) was too quick to time apart from a hit here; it will not be judged"
                for gp in plan.gates if any(ref.metric in ("ttft_agrees", "ttft_disagrees")
                                            for ref in gate_metric_refs(gp.gate))]
    out += too_few_notes(plan, cal)
    for gp in (gp for gp in plan.gates if gp.gate.severity == "fail"):
        small = [r for ref in gate_metric_refs(gp.gate)
                 if ref.metric in ("ttft_agrees", "ttft_disagrees")
                 for r in select_static(plan.requests, ref.selector, plan.params)
                 if r.kind == "probe" and r.prompt_tokens <= r.expected_cached + REREAD_UNCACHED
                 and r.prompt_tokens < need]
        if small:
            out.append(f"`{gp.gate.name}` cannot tell a cache hit from a recompute on this "
                       f"engine: its {len(small)} re-read(s) of up to "
                       f"{max(r.prompt_tokens for r in small):,} tokens are too small (a cold "
                       f"prefill of them is too quick here to stand out of the noise); a "
                       f"re-read of {need:,} tokens or more would tell (`$timing_tokens`). "
                       f"It will be `undecidable` at these sizes")
    return out


def too_few_notes(plan: Plan, cal: calibrate.Calibration) -> list[str]:
    """Output: for each fail gate that reads the prefill time of requests timed alone whose own new
    tokens are too few for it to price a token here (`record.too_few_to_price`), what they
    need."""
    ref, out = reference(cal), []
    for gp in (gp for gp in plan.gates if gp.gate.severity == "fail"):
        few = [r for ref_ in gate_metric_refs(gp.gate)
               if ref_.metric in ("prefill_time", "ttft_per_uncached")
               for r in select_static(plan.requests, ref_.selector, plan.params)
               if r.isolated and not cal.hit_prefill_s
               and too_few_to_price(r.new_tokens, "client_ttft", ref)]
        if few:
            need = too_few_to_price(few[0].new_tokens, "client_ttft", ref)
            labels = ", ".join(dict.fromkeys(r.label for r in few))
            out.append(f"`{gp.gate.name}` cannot price a token on this engine: its requests "
                       f"timed alone ({labels}) prefill {min(r.new_tokens for r in few):,} "
                       f"tokens of their own, too quick here to stand out of the noise; "
                       f"{need:,} or more would. It will be `undecidable` at these sizes")
    return out


def without_isolation(plan: Plan) -> Plan:
    """Output: `plan` with no request marked `isolated` (`RunOptions.isolation` False)."""
    reqs = tuple(r.model_copy(update={"isolated": False}) if r.isolated else r
                 for r in plan.requests)
    return plan.model_copy(update={"requests": reqs})


def start_on_clock(options: RunOptions) -> float | None:
    """Output: `options.start_at_unix` on the executor's clock (`time.perf_counter`), or None."""
    if options.start_at_unix is None:
        return None
    return time.perf_counter() + (options.start_at_unix - time.time())


async def threshold_reference(plan: Plan, link: EngineLink, sizer: Any,
                              cal: calibrate.Calibration, salt: str) -> TtftReference:
    for c in plan.calibrations:
        if c.what != "ttft_threshold":
            continue
        tokens = _whole(evaluate(c.tokens, plan.params)) if c.tokens is not None else 1024
        repeat = _whole(evaluate(c.repeat, plan.params)) if c.repeat is not None else 3
        await calibrate.ttft_threshold(link.chat, link.endpoint, sizer, salt, tokens, repeat,
                                       cal)
        limit = (link.info.max_context or 2 * SPEED_LIMIT) // 2
        await calibrate.resolve_speed(link.chat, link.endpoint, sizer, salt, tokens, cal,
                                      min(limit, SPEED_LIMIT))
    return reference(cal)


def reference(cal: calibrate.Calibration) -> TtftReference:
    """Output: the TTFT reference of a calibration."""
    # the fastest cold twin: whatever else slowed one down (the machine, the network) only
    # adds time, and a slower cold reference would let a recompute pass for a hit
    cold = max(cal.cold_prefill_tps, default=None)
    # what a request costs besides its prefill, the dearest seen: only noise makes it dearer
    # the engine's own timing of an all-but-cached prefill, the slowest seen: what such a
    # timing resolves here; only when its times told the twins apart (an engine that recomputed
    # its "cached" twin timed a whole prefill); none: a busy host's `TIMING_FLOOR_S`
    hit = max(cal.hit_prefill_s, default=None)
    apart = hit is not None and bool(cal.cold_prefill_s) and \
        hit * calibrate.MIN_SEPARATION <= min(cal.cold_prefill_s)
    floor = hit if apart else None
    return TtftReference(threshold_s=cal.threshold_s, threshold_tokens=cal.threshold_tokens,
                         cold_prefill_tps=cold, fixed_s=max(cal.fixed_s, default=0.0),
                         server_floor_s=floor)


def _whole(v: Value) -> int:
    """A calibration's count (checked: a number), as a whole number."""
    assert is_number(v)
    return int(v)


def _median(xs: list[float]) -> float | None:
    """The upper median of `xs` (None for none)."""
    return sorted(xs)[len(xs) // 2] if xs else None


def calibration_env(cal: calibrate.Calibration) -> dict[str, ParamValue]:
    return {"ttft_threshold": cal.threshold_s, "cold_ttft": _median(cal.cold_ttft_s),
            "hit_ttft": _median(cal.hit_ttft_s), "timing_floor": timing_floor(cal),
            "chars_per_token": cal.chars_per_token}


def timing_floor(cal: calibrate.Calibration) -> float:
    """Output: `$timing_floor`, the least time a timing resolves here: over the engine's own
    prefill time when it reports one (the calibration's all-but-cached twins), else a busy
    host's noise on the client's TTFT (`record.TIMING_FLOOR_S`)."""
    return reference(cal).floor(server=bool(cal.hit_prefill_s))


async def snapshot(link: EngineLink, at: str, snaps: list[dict[str, Any]], sink: Sink) -> None:
    url = link.info.metrics_url
    if not url:
        return
    counters, why = await metrics.read(link.side, url, link.endpoint.api_key)
    if counters is None:
        snaps.append({"at": at, "unavailable": why})
        return
    snap = {"at": at, **counters.model_dump()}
    snaps.append(snap)
    sink.event("metrics", snap)
def metrics_summary(snaps: list[dict[str, Any]], records: list[Record],
                    client: Mapping[str, Any] | None = None) -> MetricsSummary:
    """Engine counters over the run next to what the records say: a cross-check. Input: the
    reads of the counters (`snapshot`: the counters, or `unavailable` with why not), the
    records and the run's `client` (its sends measured again and not kept, which the engine
    counted too, are on the records' side). Output: the results' `metrics`; `unavailable`
    holds why the first read that failed did (a run without counters at both ends has no
    cross-check)."""
    failed = [s for s in snaps if "unavailable" in s]
    snaps = [s for s in snaps if "unavailable" not in s]
    counted = [r for r in records if r.error is None and not r.skipped]
    # with the sends measured again and not kept (`client`): the engine counted them too
    client = client or {}
    cached = sum(r.cached_tokens or 0 for r in counted) \
        + (client.get("remeasure_cached_tokens") or 0)
    prompt = sum(r.prompt_tokens or 0 for r in counted) \
        + (client.get("remeasure_prompt_tokens") or 0)
    # sent, but without the engine's count in the records (an abort, an error): what was planned
    uncounted = [r for r in records if not r.skipped and r.t_start_s is not None
                 and (r.error is not None or r.prompt_tokens is None)]
    out: dict[str, Any] = {"snapshots": snaps, "records_cached_tokens": cached,
                           "records_prompt_tokens": prompt,
                           "records_uncounted": len(uncounted),
                           "records_uncounted_planned_tokens":
                               sum(r.planned_prompt_tokens for r in uncounted)}
    if failed:
        out["unavailable"] = f"{failed[0]['at']}: {failed[0]['unavailable']}"
    if len(snaps) >= 2:
        hits = snaps[-1]["hits_tokens"] - snaps[0]["hits_tokens"]
        queries = snaps[-1]["queries_tokens"] - snaps[0]["queries_tokens"]
        out.update(engine_hits_tokens=hits, engine_queries_tokens=queries,
                   engine_hit_ratio=hits / queries if queries else None)
    return MetricsSummary.model_validate(out)
