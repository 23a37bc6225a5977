"""Shards run as tasks of this event loop, with the coordinator called directly: the driver's
and the workers' logic of a sharded run (workloadlang.scale) without Ray. The Ray tests
(tests/e2e/test_scale_ray.py) run the same through Ray workers."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from workloadlang.scale.coordinate import Coordinator
from workloadlang.scale.shard import ShardJob, batches, run_shard


class DirectLink:
    """A worker's `coordinate.Link`: the coordinator's methods called in this loop."""

    def __init__(self, coord: Coordinator):
        self.coord = coord
        self.calls: list[tuple[str, int]] = []

    async def now(self) -> float:
        return self.coord.now()

    def ready(self, worker):
        return self.coord.ready(worker)

    def take(self, worker, session):
        self.calls.append(("take", worker))
        return self.coord.take(worker, session)

    def give_back(self, worker, session):
        self.coord.give_back(worker, session)

    def drained(self, worker, epoch):
        self.coord.drained(worker, epoch)

    def watch(self, worker, version):
        return self.coord.watch(worker, version)

    def arrive(self, worker, k):
        return self.coord.arrive(worker, k)


class DirectCalls:
    """The driver's `driver.Calls` on the coordinator; `broken`: the barrier at which the
    coordinator fails (its `all_arrived` raises)."""

    def __init__(self, coord: Coordinator, broken: int | None = None):
        self.coord, self.broken = coord, broken

    def started(self):
        return self.coord.started()

    async def all_arrived(self, k):
        if k == self.broken:
            raise ConnectionError("the coordinator's process is gone")
        await self.coord.all_arrived(k)

    def open(self, k):
        self.coord.open(k)

    def gone(self, worker):
        self.coord.gone(worker)


class InLoop:
    """A `driver.Backend` whose workers are tasks of this loop. `fail`: worker index -> the
    exception its run raises once it has sent `after` records (a worker lost mid-run)."""

    def __init__(self, workers: int, barriers: int,
                 fail: dict[int, tuple[int, Exception]] | None = None, broken: int | None = None):
        self.coord = Coordinator(workers, barriers)
        self.coordinator = DirectCalls(self.coord, broken)
        self.tasks: dict[int, asyncio.Future] = {}
        self.fail = fail or {}

    def launch(self, job: ShardJob):
        queue: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(run_shard(job, DirectLink(self.coord), queue.put_nowait))
        self.tasks[job.index] = task
        return self._stream(job.index, batches(task, queue))

    async def _stream(self, index: int, items):
        sent = 0
        async for batch in items:
            yield batch
            sent += sum(len(it[1]) for it in batch if it[0] == "records")
            if index in self.fail and sent >= self.fail[index][0]:
                self.tasks[index].cancel()  # the worker is gone with what it had in flight
                raise self.fail[index][1]

    async def where(self, worker: int) -> dict[str, Any]:
        return {"pid": os.getpid(), "node": "this-loop"}

    def stop(self, worker: int) -> None:
        self.tasks[worker].cancel()

    async def close(self) -> None:
        for t in self.tasks.values():
            t.cancel()


def backend_for(fail=None, broken=None):
    async def make(workers: int, barriers: int) -> InLoop:
        return InLoop(workers, barriers, fail, broken)

    return make
