"""One worker's part of a sharded run: its shard measured as any run is, times on the driver's
clock, records streamed back as they complete.

Input: a `ShardJob` (the whole plan, the shard's sessions and concurrency, the engine and the
driver's calibration), a `Link` to the run's `Coordinator`, and `emit`, which takes each item
for the driver. Output: items, in order: `("sent", [(request id, wall clock on the driver's),
...])` as requests are written (before their records: a driver that loses the worker knows
what it had sent), `("records", [record JSON, ...])` batches, `("event", kind, data)`, and
last `("done", summary)` with the worker's client health, clock offset and how late it
started.

The worker measures its clock offset to the driver first (`clocks`), opens its own link to the
engine (`api.open_engine`) and measures its shard (`api.measure_workload` with the shard's
sessions and the driver's calibration: the same sizer, so the same requests, and the same TTFT
reference; no calibration request), linked to the rest of the run by `ShardShared`: the
run-wide start, phase barriers and isolation.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from workloadlang.plan.model import Plan
from workloadlang.results import Record
from workloadlang.run.calibrate import Calibration
from workloadlang.scale import clocks
from workloadlang.scale.coordinate import Link, SharedIsolation


@dataclass
class ShardJob:
    """What a worker needs to run its shard (it travels to the worker: plain data)."""

    index: int
    plan: Plan
    sessions: tuple[str, ...]
    concurrency: int
    base_url: str
    api_key: SecretStr | None
    engine: dict[str, Any]  # `open_engine`'s: model, max_context, cached_zero_when_absent, ...
    calibration: Calibration
    time_budget_s: float | None = None


class ShardShared:
    """A shard's link to the rest of its run (`run.runner.Shared`): the run-wide start (the
    driver's instant on this worker's clock), barriers and isolation, through the coordinator."""

    def __init__(self, link: Link, worker: int, offset: clocks.Offset,
                 clock: Callable[[], float] = time.perf_counter,
                 emit: Callable[[tuple], Any] = lambda item: None):
        self.link, self.worker, self.offset, self.clock = link, worker, offset, clock
        self.emit = emit
        self.isolation = SharedIsolation(link, worker)
        self.late = 0.0  # how long after the common start instant this worker learnt it

    async def start(self) -> float:
        """Wait until every worker is ready. Output: the common start instant on `clock`."""
        self.isolation.start()
        instant = await self.link.ready(self.worker)
        local = clocks.local_instant(instant, self.offset, mono=self.clock)
        self.late = max(0.0, self.clock() - local)  # the instant came after it had passed
        return local

    async def barrier(self, k: int) -> None:
        await self.link.arrive(self.worker, k)

    def sent(self, rid: str) -> None:
        """Tell the driver: `rid` is written now, with the wall clock on the driver's."""
        self.emit(("sent", [(rid, time.time() + self.offset.offset_s)]))

    def stop(self) -> None:
        self.isolation.stop()


class ShardSink:
    """The worker's sink: each record as JSON on the driver's clock to `emit` (in `("records",
    [...])` items), each note as `("event", kind, data)`."""

    def __init__(self, emit: Callable[[tuple], Any], offset: clocks.Offset):
        self.emit, self.offset = emit, offset
        self.count = 0

    def record(self, rec: Record) -> None:
        self.count += 1
        self.emit(("records", [clocks.to_driver(rec.model_dump(mode="json"), self.offset)]))

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.emit(("event", kind, data))


async def run_shard(job: ShardJob, link: Link, emit: Callable[[tuple], Any]) -> None:
    """Run the shard (see the module); the last item emitted is `("done", summary)`. Raises
    what the engine link raises (an `EndpointError`)."""
    from workloadlang import api

    offset = await clocks.measure(link.now)
    async with api.open_engine(job.base_url, job.api_key, **job.engine) as engine:
        shared = ShardShared(link, job.index, offset, emit=emit)
        sink = ShardSink(emit, offset)
        plan = job.plan.model_copy(update={"concurrency": job.concurrency})  # its share
        options = api.RunOptions(time_budget_s=job.time_budget_s,
                                 sessions=frozenset(job.sessions), calibration=job.calibration)
        try:
            measured = await api.measure_workload(plan, engine, sink, options, shared)
        finally:
            shared.stop()
    emit(("done", summary(job, measured.client.model_dump(), offset, shared.late, sink.count,
                          measured.incomplete)))


async def batches(task: asyncio.Future, queue: asyncio.Queue) -> AsyncIterator[list[tuple]]:
    """Input: the task running `run_shard` and the queue its `emit` fills. Output: the items as
    batches of what is there at once (consecutive records in one item), until the task has
    ended and the queue is empty; then raises what the task raised."""
    while True:
        get = asyncio.ensure_future(queue.get())
        await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            if queue.empty():
                break
            continue
        items = [get.result()]
        while not queue.empty():
            items.append(queue.get_nowait())
        yield joined(items)
    task.result()  # raises what the run raised


def joined(items: list[tuple]) -> list[tuple]:
    """Output: `items` with each run of consecutive `records` (or `sent`) items made one."""
    out: list[tuple] = []
    for item in items:
        if item[0] in ("records", "sent") and out and out[-1][0] == item[0]:
            out[-1] = (item[0], out[-1][1] + item[1])
        else:
            out.append(item)
    return out


def summary(job: ShardJob, client: dict[str, Any], offset: clocks.Offset, late_s: float,
            records: int, incomplete: str | None) -> dict[str, Any]:
    """Output: the worker's entry in the results' `client.workers`: its shard, clock offset,
    how late it started, its records and its client health (`cpu_s`: the worker process's CPU
    time over its run)."""
    cpu = client.get("cpu_s")
    return {"worker": job.index, "pid": os.getpid(), "sessions": list(job.sessions),
            "concurrency": job.concurrency, "records": records, **offset.as_dict(),
            "start_late_s": round(late_s, 6), "incomplete": incomplete, **client,
            "cpu_per_request_ms": round(cpu * 1000 / records, 3) if cpu and records else None}
