"""One `wl run`: discover the engine, calibrate, execute the plan, judge the gates, keep it all.

Input: a `Plan`, an `Endpoint` plus the discovered `EngineInfo`, where to write records and
results, and a progress `Sink` (plain lines or the live view).
Output: `Results` (the summary JSON) and an exit code (see docs/cli.md).

Records are written as they complete (one flushed JSON line each), so a run killed at any moment
leaves a valid JSONL of every completed request. The API key lives only inside the `Endpoint`'s
`SecretStr` and never reaches a file.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
from pydantic import BaseModel

from workloadlang.evaluate import evaluate
from workloadlang.gates import (
    GateResult,
    evaluate_gates,
    evaluate_report,
    failed,
    session_verdicts,
)
from workloadlang.plan.model import Plan
from workloadlang.plan.realise import Realiser
from workloadlang.run import calibrate, metrics
from workloadlang.run.client import Endpoint
from workloadlang.run.executor import Executor, RunResult, Sink
from workloadlang.run.record import Record, TtftReference

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_ENDPOINT, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class Results(BaseModel):
    """The summary JSON of one run (`--output`)."""

    schema_: str = "workloadlang.results/1"
    workload: str
    source: str
    params: dict[str, Any]
    salt: str
    plan_hash: str
    engine: dict[str, Any]
    started_at: str
    elapsed_s: float
    hit_ratio: float
    calibration: dict[str, Any]
    metrics: dict[str, Any]
    client: dict[str, Any]
    incomplete: str | None
    exit_code: int
    gates: list[GateResult]
    verdicts: dict[str, str]
    report: dict[str, Any]
    report_format: dict[str, str] = {}
    records: list[Record]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, by_alias=False).replace('"schema_"', '"schema"', 1)


class JsonlWriter:
    """Appends one JSON object per line and flushes it at once."""

    def __init__(self, path: str | Path | None):
        self.fh: IO[str] | None = open(path, "w", encoding="utf-8") if path else None

    def write(self, obj: dict[str, Any]) -> None:
        if self.fh:
            self.fh.write(orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
                          + "\n")
            self.fh.flush()

    def close(self) -> None:
        if self.fh:
            self.fh.close()


class Tee:
    """The executor's sink: the JSONL file first, then the person watching."""

    def __init__(self, writer: JsonlWriter, view: Sink):
        self.writer, self.view = writer, view

    def record(self, rec: Record) -> None:
        self.writer.write(rec.model_dump(mode="json"))
        self.view.record(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.writer.write({"type": kind, **data})
        self.view.event(kind, data)


def exit_code(run: RunResult | None, gates: list[GateResult], interrupted: bool) -> int:
    if interrupted:
        return EXIT_INTERRUPTED
    if run is None or run.incomplete:
        return EXIT_INCOMPLETE
    return EXIT_GATE if failed(gates) else EXIT_OK


async def run_plan(plan: Plan, endpoint: Endpoint, engine: dict[str, Any], tokenizer: Any,
                   sink: Tee, *, client: httpx.AsyncClient, metrics_url: str | None,
                   time_budget_s: float | None = None) -> Results:
    """Calibrate, execute and judge. Cancellation (Ctrl-C) still judges what was measured."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sink.event("plan", {"workload": plan.workload, "plan_hash": plan.plan_hash, "salt": plan.salt,
                        "params": plan.params, "requests": len(plan.requests),
                        "engine": engine})
    cal = calibrate.Calibration()
    snaps: list[dict[str, Any]] = []
    run: RunResult | None = None
    interrupted = False
    t0 = time.perf_counter()
    executor = None
    try:
        sizer = await calibrate.sizer_for(client, endpoint, tokenizer, plan.salt, cal)
        ref = await threshold_reference(plan, client, endpoint, sizer, cal, fresh_salt())
        sink.event("calibration", cal.model_dump())
        await snapshot(client, metrics_url, endpoint, "start", snaps, sink)

        async def on_phase(name: str) -> None:
            await snapshot(client, metrics_url, endpoint, f"after {name}", snaps, sink)

        executor = Executor(plan, Realiser(plan, sizer), client, endpoint, sink, ref=ref,
                            on_phase=on_phase, time_budget_s=time_budget_s,
                            prefill_own=bool(engine.get("prefill_own")))
        run = await executor.run()
        await snapshot(client, metrics_url, endpoint, "end", snaps, sink)
    except asyncio.CancelledError:
        interrupted = True
        if executor is not None:
            executor.fill_unrun()
            run = RunResult(records=[executor.records[r.id] for r in plan.requests],
                            elapsed_s=time.perf_counter() - t0, incomplete="interrupted")
    records = run.records if run else []
    env = calibration_env(cal)
    gates = evaluate_gates(plan, records, env)
    for g in gates:
        sink.event("gate", g.model_dump(mode="json"))
    results = Results(
        workload=plan.workload, source=plan.source, params=plan.params, salt=plan.salt,
        plan_hash=plan.plan_hash, engine=engine, started_at=started,
        elapsed_s=run.elapsed_s if run else time.perf_counter() - t0, hit_ratio=plan.hit_ratio,
        calibration=cal.model_dump(), metrics=metrics_summary(snaps, records),
        client=run.client if run else {}, incomplete=run.incomplete if run else "not started",
        exit_code=exit_code(run, gates, interrupted), gates=gates,
        verdicts=session_verdicts(plan, gates), report=evaluate_report(plan, records, env),
        report_format={item.name: item.fmt for item in plan.report},
        records=records)
    sink.event("summary", {"exit_code": results.exit_code, "incomplete": results.incomplete,
                           "verdicts": results.verdicts, "report": results.report})
    return results


def fresh_salt() -> str:
    """Calibration twins get a salt of their own, fresh every run: a replayed run (`--salt S`)
    against a warm server must not find its "cold" twin already cached."""
    return secrets.token_hex(6)


async def threshold_reference(plan: Plan, client, endpoint, sizer, cal,
                              salt: str) -> TtftReference:
    for c in plan.calibrations:
        if c.what != "ttft_threshold":
            continue
        tokens = int(evaluate(c.tokens, plan.params)) if c.tokens is not None else 1024
        repeat = int(evaluate(c.repeat, plan.params)) if c.repeat is not None else 3
        await calibrate.ttft_threshold(client, endpoint, sizer, salt, tokens, repeat, cal)
    cold = [cal.threshold_tokens / t for t in cal.cold_ttft_s if t] if cal.threshold_tokens else []
    return TtftReference(threshold_s=cal.threshold_s, threshold_tokens=cal.threshold_tokens,
                         cold_prefill_tps=sorted(cold)[len(cold) // 2] if cold else None)


def calibration_env(cal: calibrate.Calibration) -> dict[str, Any]:
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    return {"ttft_threshold": cal.threshold_s, "cold_ttft": med(cal.cold_ttft_s),
            "hit_ttft": med(cal.hit_ttft_s),
            "chars_per_token": cal.chars_per_token}


async def snapshot(client, url: str | None, endpoint: Endpoint, at: str,
                   snaps: list[dict[str, Any]], sink: Tee) -> None:
    if not url:
        return
    counters, why = await metrics.read(client, url, endpoint.api_key)
    if counters is None:
        snaps.append({"at": at, "unavailable": why})
        return
    snap = {"at": at, **counters.model_dump()}
    snaps.append(snap)
    sink.event("metrics", snap)


def metrics_summary(snaps: list[dict[str, Any]], records: list[Record]) -> dict[str, Any]:
    """Engine counters over the run next to what the records say: a cross-check. Input: the
    reads of the counters (`snapshot`: the counters, or `unavailable` with why not) and the
    records. Output: the results' `metrics`; `unavailable` holds why the first read that
    failed did (a run without counters at both ends has no cross-check)."""
    failed = [s for s in snaps if "unavailable" in s]
    snaps = [s for s in snaps if "unavailable" not in s]
    cached = sum(r.cached_tokens or 0 for r in records if r.error is None and not r.skipped)
    prompt = sum(r.prompt_tokens or 0 for r in records if r.error is None and not r.skipped)
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
    return out
