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
import os
import secrets
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, NamedTuple

import httpx
import orjson
from pydantic import BaseModel, ValidationError

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
from workloadlang.run.errors import mentions, redact_value
from workloadlang.run.executor import Executor, RunResult, Sink
from workloadlang.run.transport import alone
from workloadlang.run.record import Record, TtftReference
from workloadlang.run.theory import cache_theory

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_ENDPOINT, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_WRITE = 5
"""A file asked for (`--output`, `--records`, `--report`) could not be written there: the run
finished, its verdict was printed, and the file went to a fallback path that stderr names."""


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
    impossible: int = 0  # records whose counts no engine can report (`Record.impossible`)
    # measured hit rate next to the perfect and LRU caches' (run/theory.py)
    cache_theory: dict[str, Any] | None = None
    records: list[Record]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, by_alias=False).replace('"schema_"', '"schema"', 1)


class ResultsFileError(ValueError):
    """A file that is not a readable results file; the message is one line saying why."""


def read_results(path: str | Path) -> Results:
    """A results file (`wl run --output`) as `Results`. Raises `ResultsFileError` with a
    one-line reason: unreadable, empty, cut short, not JSON, or not a results file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise ResultsFileError(f"cannot read {path}: {e.strerror or e}") from None
    if not raw.strip():
        raise ResultsFileError(f"{path} is empty (a run stopped before writing its results "
                               "leaves nothing; its --records JSONL has every completed request)")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ResultsFileError(f"{path} is not JSON or was cut short ({e}); a run killed while "
                               "writing it leaves such a file, its --records JSONL has every "
                               "completed request") from None
    return _results_of(data, str(path))


def _results_of(data: Any, path: str) -> Results:
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path} is not a workloadlang results file (not a JSON object)")
    if "schema" in data:
        data["schema_"] = data.pop("schema")
    schema = data.get("schema_", "")
    if not isinstance(schema, str) or not schema.startswith("workloadlang.results/"):
        raise ResultsFileError(f"{path} is not a workloadlang results file (schema {schema!r})")
    try:
        return Results.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ResultsFileError(f"{path} is not a valid results file ({where}: {first['msg']}; "
                               f"{e.error_count()} problem(s))") from None


class Delivery(NamedTuple):
    """Where a file asked for by `flag` (`--output`, `--records`, `--report`) ended up:
    `written` is the path (a fallback when `error` says why the asked path failed; None when
    no fallback could be written either)."""

    flag: str
    asked: str
    written: str | None
    error: str | None = None


FALLBACK_NAMES = {"--output": "results.json", "--records": "records.jsonl",
                  "--report": "report.html"}


def fallback_paths(flag: str) -> list[str]:
    """Where a file goes when its asked path cannot be written: a fresh file in the temp
    directory, else in the working directory (`wl-fallback-1a2b3c-results.json`)."""
    name = f"wl-fallback-{secrets.token_hex(3)}-{FALLBACK_NAMES.get(flag, 'out')}"
    return [os.path.join(folder, name) for folder in (tempfile.gettempdir(), os.getcwd())]


def deliver(flag: str, asked: str, write: Callable[[str], Any]) -> Delivery:
    """`write(path)` at the asked path, else at the first fallback that takes it. Never raises
    for a path problem (OSError); the `Delivery` says what happened."""
    try:
        write(asked)
        return Delivery(flag, asked, asked)
    except OSError as exc:
        error = exc.strerror or str(exc)
    for path in fallback_paths(flag):
        try:
            write(path)
            return Delivery(flag, asked, path, error)
        except OSError:
            continue
    return Delivery(flag, asked, None, error)


class JsonlWriter:
    """Appends one JSON object per line and flushes it at once. A write that fails (a full
    disk, a path gone) moves the file to a fallback (`fallback_paths`: the lines written so
    far copied first) and goes on there; it never raises, `delivery` says where the lines are."""

    def __init__(self, path: str | Path | None):
        self.path = str(path) if path else None
        self.fh: IO[bytes] | None = None
        self.good = 0  # bytes of whole lines written and flushed
        self.delivery = Delivery("--records", self.path, self.path) if self.path else None
        if self.path:
            try:
                self.fh = open(self.path, "wb")
            except OSError as exc:
                self._fail_over(exc, b"")

    def write(self, obj: dict[str, Any]) -> None:
        if self.fh is None:
            return
        line = orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"
        try:
            self.fh.write(line)
            self.fh.flush()
        except OSError as exc:
            self._fail_over(exc, line)
            return
        self.good += len(line)

    def _fail_over(self, exc: OSError, pending: bytes) -> None:
        """Continue in a fallback file: what was written whole so far, then `pending`."""
        assert self.path is not None
        error = exc.strerror or str(exc)
        self._close_quietly()
        done = self._copied_so_far()
        for path in fallback_paths("--records"):
            try:
                fh = open(path, "wb")
                fh.write(done + pending)
                fh.flush()
            except OSError:
                continue
            self.fh, self.good = fh, len(done) + len(pending)
            self.delivery = Delivery("--records", self.path, path, error)
            return
        self.delivery = Delivery("--records", self.path, None, error)

    def _copied_so_far(self) -> bytes:
        """The whole lines already in the asked file (only a regular file is read back)."""
        if not self.good or not os.path.isfile(self.path or ""):
            return b""
        try:
            with open(self.path, "rb") as fh:
                return fh.read(self.good)
        except OSError:
            return b""

    def _close_quietly(self) -> None:
        fh, self.fh = self.fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.fh is None:
            return
        try:
            self.fh.close()
        except OSError as exc:  # a buffered byte refused at the end: keep what was flushed
            self.fh = None
            self._fail_over(exc, b"")
            self._close_quietly()
        self.fh = None


class Tee:
    """The executor's sink: the JSONL file first, then the person watching. With the API key
    (`secret`), whatever came from the engine and holds it (a reply that echoes it, a model
    id) is redacted before either sees it."""

    def __init__(self, writer: JsonlWriter, view: Sink, secret: str | None = None):
        self.writer, self.view, self.secret = writer, view, secret

    def record(self, rec: Record) -> None:
        data = rec.model_dump(mode="json")
        if self.secret and mentions(orjson.dumps(data), self.secret):
            data = redact_value(data, self.secret)
            rec = Record.model_validate(data)
        self.writer.write(data)
        self.view.record(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        data = redact_value(data, self.secret)
        self.writer.write({"type": kind, **data})
        self.view.event(kind, data)


def redacted(results: Results, secret: str | None) -> Results:
    """`results` with the API key redacted from every string in it (records, engine, notes):
    what is written and printed. The same object when the key is nowhere in it."""
    if not secret:
        return results
    data = results.model_dump(mode="json")
    if not mentions(orjson.dumps(data), secret):
        return results
    return Results.model_validate(redact_value(data, secret))


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
        alone(True)  # calibration sends one request at a time: read its stamps at once
        try:
            ref = await threshold_reference(plan, client, endpoint, sizer, cal, fresh_salt())
        finally:
            alone(False)
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
        impossible=sum(1 for r in records if r.impossible),
        cache_theory=cache_theory(plan, records), records=records)
    sink.event("summary", {"exit_code": results.exit_code, "incomplete": results.incomplete,
                           "verdicts": results.verdicts, "report": results.report,
                           "impossible": results.impossible})
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
    # the fastest cold twin: whatever else slowed one down (the machine, the network) only
    # adds time, and a slower cold reference would let a recompute pass for a hit
    cold = max(cal.cold_prefill_tps, default=None)
    return TtftReference(threshold_s=cal.threshold_s, threshold_tokens=cal.threshold_tokens,
                         cold_prefill_tps=cold)


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
