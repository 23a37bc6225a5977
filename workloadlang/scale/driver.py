"""The driver of a sharded run: plan once, calibrate once, run the shards, merge one result.

Input: a `Plan`, the driver's `EngineLink`, a `Sink` (the one JSONL and the view), a `Backend`
that runs shards on workers (`ray_run.RayBackend`), the workers asked for and the time budget.
Output: `Measured`, as a single-process run gives it (`run.runner.measure`), which the gates
judge as they judge any run (`api.judge`).

The driver partitions the plan (`partition`), calibrates as a single process does (the sizer,
the TTFT reference: every worker uses them, so the workers send the same requests and judge by
the same reference), reads the engine's counters at the start, after each phase (when every
worker has reached the phase's barrier, before it opens) and at the end, and gives each record
to the sink the moment it arrives from a worker: what completed is on disk whatever happens
next. A worker that dies (or fails) is reported with the sessions it held; of its requests
without a record, those it had said it sent are recorded as sent with their outcome unknown (an
error of kind `lost`), the others as not run, with the reason; the run is incomplete (exit 4).

Records are merged as records: every number the gates, the report and `wl compare` read is
computed from the merged raw records, never from figures the workers summarised. The client's
health is per worker (`client.workers`); the run-wide figures are the worst worker's, counts
are summed, and `client_bottleneck` is set when any worker was one (`bottleneck_workers`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from workloadlang.plan.model import Plan
from workloadlang.results import Record, Sink
from workloadlang.resultsmodels import ClientHealth, WorkerHealth
from workloadlang.scale.partition import Partition, partition
from workloadlang.scale.shard import ShardJob

STOP_GRACE_S = 10.0
"""After Ctrl-C, how long the workers have to send the records of what they stopped."""


class Calls(Protocol):
    """The driver's calls to the run's coordinator (`coordinate.Coordinator`)."""

    def started(self) -> Awaitable[float]: ...

    def all_arrived(self, k: int) -> Awaitable[None]: ...

    def open(self, k: int) -> None: ...

    def gone(self, worker: int) -> None: ...


class Backend(Protocol):
    """Where shards run. `coordinator`: the run's coordinator, for `len(jobs)` workers."""

    coordinator: Calls

    def launch(self, job: ShardJob) -> AsyncIterator[list[tuple]]:
        """Start the job's worker. Output: its items in batches as they come (`shard.batches`);
        raises when the worker dies or fails."""

    async def where(self, worker: int) -> dict[str, Any]:
        """Output: where the worker runs (`pid`, `node`)."""

    def stop(self, worker: int) -> None:
        """Ask the worker to stop its run (what it stops is recorded as interrupted)."""

    async def close(self) -> None:
        """End every worker and the coordinator."""


class Merge:
    """The records as they arrive from the workers, and what became of each worker."""

    def __init__(self, plan: Plan, part: Partition, sink: Sink):
        self.plan, self.part, self.sink = plan, part, sink
        self.records: dict[str, Record] = {}
        self.sent: dict[str, float] = {}  # written by a worker -> when (driver's wall clock)
        self.done: dict[int, WorkerHealth] = {}
        self.died: dict[int, str] = {}
        self.where: dict[int, dict[str, Any]] = {}
        self.failed: str | None = None  # the run as a whole could not go on (`run_jobs`)

    def item(self, worker: int, item: tuple) -> None:
        """One item from `worker` (see `shard.run_shard`)."""
        if item[0] == "records":
            for data in item[1]:
                rec = Record.model_validate(data)
                self.records[rec.id] = rec
                self.sent.pop(rec.id, None)
                self.sink.record(rec)
        elif item[0] == "sent":
            self.sent.update((rid, at) for rid, at in item[1] if rid not in self.records)
        elif item[0] == "event":
            self.sink.event(item[1], {**item[2], "worker": worker})
        elif item[0] == "done":  # the worker's entry, as `shard.summary` made it
            self.done[worker] = WorkerHealth.model_validate(item[1])

    def lost(self, worker: int, reason: str) -> None:
        """`worker` died or failed: its requests without a record are recorded as sent with
        their outcome unknown (an error of kind `lost`) when it had said it sent them, else as
        not run."""
        from workloadlang.run.record import lost_record, skipped_record

        self.died[worker] = reason
        mine = set(self.part.shards[worker].sessions)
        self.sink.event("worker_lost", {"worker": worker, "reason": reason,
                                        "sessions": sorted(mine)})
        for req in self.plan.requests:
            if req.session in mine and req.id not in self.records:
                rec = lost_record(req, self.sent[req.id], f"worker {worker} {reason}") \
                    if req.id in self.sent else \
                    skipped_record(req, f"not run: worker {worker} {reason}")
                self.records[rec.id] = rec
                self.sink.record(rec)

    def in_plan_order(self) -> list[Record]:
        return [self.records[r.id] for r in self.plan.requests if r.id in self.records]

    def incomplete(self) -> str | None:
        """Why the run is incomplete: the coordinator failed, a worker lost (with its
        sessions), else the first worker's own reason, else None."""
        if self.failed:
            return self.failed
        if self.died:
            return "; ".join(f"worker {w} {why}: its sessions "
                             f"{', '.join(self.part.shards[w].sessions)} did not run to their end"
                             for w, why in sorted(self.died.items()))
        return next((d.incomplete for _, d in sorted(self.done.items()) if d.incomplete), None)


async def measure_sharded(plan: Plan, engine: Any, sink: Sink, backend_for, options: Any, *,
                          workers: int, worker_url: str | None = None):
    """Calibrate, run the shards, read the counters (see the module). `backend_for(n,
    barriers)` makes the backend for `n` workers; `options`: the run's `api.RunOptions` (its
    time budget and isolation hold for every worker); `worker_url`: the engine's base URL as
    the workers reach it (default: the driver's). Output: `run.runner.Measured`."""
    from workloadlang import api
    from workloadlang.run.runner import (
        Measured,
        calibration_env,
        metrics_summary,
        plan_event,
        resized,
        snapshot,
        without_isolation,
    )

    if not options.isolation:
        plan = without_isolation(plan)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    plan_event(plan, engine, sink, workers=len(partition(plan, workers).shards))
    cal = await api.calibrate(plan, engine, sink)
    plan = resized(plan, cal, options, engine, sink)
    part = partition(plan, workers)  # of the plan as sized for the engine
    for note in part.notes:
        sink.event("note", {"message": note})
    snaps: list[dict[str, Any]] = []
    await snapshot(engine, "start", snaps, sink)
    merge = Merge(plan, part, sink)
    t0 = time.time()
    backend = await backend_for(len(part.shards), len(plan.phases) + 1)
    url = worker_url or engine.endpoint.base_url
    jobs = [job_for(plan, engine, url, sh, cal, options.time_budget_s) for sh in part.shards]
    interrupted = False
    try:
        start, elapsed = await run_jobs(plan, backend, jobs, merge, engine, snaps, sink)
    except asyncio.CancelledError:
        interrupted, elapsed = True, time.time() - t0
    finally:
        await backend.close()
    await snapshot(engine, "end", snaps, sink)
    records, client = merge.in_plan_order(), merged_client(merge, part)
    return Measured(records=records, started_at=started, elapsed_s=elapsed,
                    calibration=cal.model_copy(deep=True), env=calibration_env(cal),
                    metrics=metrics_summary(snaps, records, client.model_dump()),
                    client=client,
                    incomplete="interrupted" if interrupted else merge.incomplete(),
                    interrupted=interrupted, plan=plan)


def job_for(plan: Plan, engine: Any, url: str, shard: Any, cal: Any,
            time_budget_s: float | None) -> ShardJob:
    """Output: the shard's job: the engine as the driver discovered it, its calibration."""
    ep = engine.endpoint
    return ShardJob(index=shard.index, plan=plan, sessions=shard.sessions,
                    concurrency=shard.concurrency, base_url=url, api_key=ep.api_key,
                    engine={"model": ep.model, "max_context": engine.info.max_context,
                            "cached_zero_when_absent": ep.cached_zero_when_absent,
                            "idle_timeout_s": ep.idle_timeout_s, "sim": engine.sim},
                    calibration=cal, time_budget_s=time_budget_s)


async def run_jobs(plan: Plan, backend: Backend, jobs: list[ShardJob], merge: Merge, engine: Any,
                   snaps: list[dict[str, Any]], sink: Sink) -> tuple[float, float]:
    """Run every job to its end, the barriers driven meanwhile. Output: the run's start
    instant and its elapsed seconds, on the driver's clock. On cancellation, or when the
    coordinator fails (`merge.failed`), the workers are asked to stop and their last records
    are waited for (`STOP_GRACE_S`)."""
    coord = backend.coordinator
    t0 = time.time()
    streams = [asyncio.ensure_future(follow(backend, job, merge)) for job in jobs]
    barriers = asyncio.ensure_future(drive_barriers(plan, coord, engine, snaps, sink))
    try:
        # a cancelled wait leaves the streams running; the barriers end only by failing early
        await asyncio.wait([*streams, barriers], return_when=asyncio.FIRST_EXCEPTION)
        if barriers.done() and (failure := barriers.exception()) is not None:
            merge.failed = f"the run's coordinator failed ({what(failure)})"
            await stop_all(backend, jobs, streams)
        await asyncio.wait(streams)
    except asyncio.CancelledError:
        await stop_all(backend, jobs, streams)
        raise
    finally:
        barriers.cancel()
    try:
        start = await asyncio.wait_for(coord.started(), STOP_GRACE_S)
    except Exception:  # noqa: BLE001 (no worker got to the start, or the coordinator is gone)
        start = t0
    return start, time.time() - start


async def stop_all(backend: Backend, jobs: list[ShardJob],
                   streams: Sequence[asyncio.Future[Any]]) -> None:
    """Ask every worker to stop; wait for their last records (`STOP_GRACE_S`)."""
    for job in jobs:
        backend.stop(job.index)
    await asyncio.wait(streams, timeout=STOP_GRACE_S)


async def follow(backend: Backend, job: ShardJob, merge: Merge) -> None:
    """The worker's items to `merge` as they come; a worker that dies or fails is `lost`."""
    i = job.index
    try:
        stream = backend.launch(job)
        where = await backend.where(i)
        merge.where[i] = where
        merge.sink.event("worker", {"worker": i, **where, "sessions": list(job.sessions),
                                    "concurrency": job.concurrency})
        async for batch in stream:
            for item in batch:
                merge.item(i, item)
        if i not in merge.done:
            merge.lost(i, "ended without finishing its run")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 (a worker's death or failure is data: the reason)
        merge.lost(i, lost_reason(exc))
    finally:
        backend.coordinator.gone(i)


def lost_reason(exc: BaseException) -> str:
    """Output: why a worker was lost, in a few words: `died (...)` or `failed (...)`."""
    name = type(exc).__name__
    died = name in ("ActorDiedError", "RayActorError", "ActorUnavailableError")
    return f"{'died' if died or 'died' in str(exc).lower() else 'failed'} ({what(exc)})"


def what(exc: BaseException) -> str:
    """Output: the exception's type and the first line of its message (200 characters)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


async def drive_barriers(plan: Plan, coord: Calls, engine: Any, snaps: list[dict[str, Any]],
                         sink: Sink) -> None:
    """Open barrier k once every worker has reached it, after reading the engine's counters at
    the end of the phase before it (as `run.runner.measure` does)."""
    from workloadlang.run.runner import snapshot

    for k in range(len(plan.phases) + 1):
        await coord.all_arrived(k)
        if k > 0:
            await snapshot(engine, f"after {plan.phases[k - 1]}", snaps, sink)
        coord.open(k)


SUMMED = ("client_delay_over_10ms", "ttft_late", "isolated_requests", "isolation_wait_s",
          "isolation_held_s", "cpu_s", "remeasured_requests", "remeasures", "remeasure_s",
          "remeasure_prompt_tokens", "remeasure_cached_tokens", "stretches_again",
          "stretches_again_kept", "pressure_again")
WORST = ("loop_lag_p99_ms", "loop_lag_max_ms", "client_delay_p99_ms", "client_delay_max_ms",
         "ttft_late_max_ms", "gc_pause_max_ms")


def merged_client(merge: Merge, part: Partition) -> ClientHealth:
    """Output: the results' `client`: per worker (`workers`), the counts summed, every other
    figure the worst worker's, and which workers were a bottleneck."""
    workers = []
    for sh in part.shards:
        own = merge.done.get(sh.index)
        entry = own.model_dump() if own is not None else {"worker": sh.index,
                                                          "sessions": list(sh.sessions)}
        entry.update(merge.where.get(sh.index, {}))
        if sh.index in merge.died:
            entry["lost"] = merge.died[sh.index]
        workers.append(WorkerHealth.model_validate(entry))
    done = [merge.done[i] for i in sorted(merge.done)]
    out: dict[str, Any] = {}
    for key in sorted({k for d in done for k in d.model_fields_set}):
        values = [v for d in done if isinstance(v := getattr(d, key), (int, float))
                  and not isinstance(v, bool)]
        if key in SUMMED and values:
            out[key] = round(sum(values), 6)
        elif key in WORST and values:
            out[key] = max(values)
    slow = [d.worker for d in done if d.client_bottleneck]
    out.update(client_bottleneck=bool(slow), bottleneck_workers=slow, workers=workers,
               sharding_notes=list(part.notes))
    return ClientHealth.model_validate(out)


async def run_sharded(plan: Plan, engine: Any, sink: Sink, backend_for, options: Any = None, *,
                      workers: int, worker_url: str | None = None):
    """`api.run_workload` over shards: measure (`measure_sharded`), then judge the merged
    records as any run's (`api.judge`). Output: `results.Results`."""
    from workloadlang import api

    options = options or api.RunOptions()
    measured = await measure_sharded(plan, engine, sink, backend_for, options, workers=workers,
                                     worker_url=worker_url)
    return api.judge(measured.plan or plan, measured, engine.engine_summary(), sink)
