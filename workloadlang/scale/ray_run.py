"""A sharded run on Ray workers (`wl run W --workers N [--ray ADDRESS]`).

Input: the plan, the driver's `EngineLink`, the sink, the workers asked for, a Ray cluster's
address (None: a local Ray instance started for the run). Output: `results.Results`
(`driver.run_sharded`).

The run's coordinator is an actor placed on the driver's node (its clock is the driver's: the
workers measure their offsets against it); each shard runs in a `ShardActor` (one CPU each,
spread over the cluster's nodes) whose `run` streams the shard's items back as they come (a Ray
streaming generator). A worker process that dies ends its stream with an error: the driver
reports it with its sessions (`driver.Merge.lost`).

The engine's address as the workers reach it (`worker_url`): as given, unless it names this
machine's loopback and the cluster has other nodes; then the embedded simulator (`--sim`,
which listens on every interface for such a run) is reached at the driver node's address, and
any other engine must be given at an address the workers can reach (exit 2).

This is the only module that imports Ray; nothing imports it unless `--workers` is given.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from workloadlang.scale import ScaleError
from workloadlang.scale.coordinate import Coordinator
from workloadlang.scale.shard import ShardJob, batches, run_shard

WHERE_TIMEOUT_S = 120.0
"""How long a worker may take to start (a cluster without a free CPU never starts it)."""

LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


class CoordinatorActor:
    """`coordinate.Coordinator` behind an actor: the driver's and the workers' calls."""

    def __init__(self, workers: int, barriers: int):
        self.c = Coordinator(workers, barriers)

    def now(self) -> float:
        return self.c.now()

    async def ready(self, worker: int) -> float:
        return await self.c.ready(worker)

    async def started(self) -> float:
        return await self.c.started()

    async def arrive(self, worker: int, k: int) -> None:
        await self.c.arrive(worker, k)

    async def all_arrived(self, k: int) -> None:
        await self.c.all_arrived(k)

    def open(self, k: int) -> None:
        self.c.open(k)

    async def take(self, worker: int, session: str):
        return await self.c.take(worker, session)

    def give_back(self, worker: int, session: str) -> None:
        self.c.give_back(worker, session)

    def drained(self, worker: int, epoch: int) -> None:
        self.c.drained(worker, epoch)

    async def watch(self, worker: int, version: int):
        return await self.c.watch(worker, version)

    def gone(self, worker: int) -> None:
        self.c.gone(worker)


class ActorCalls:
    """The coordinator actor's methods as a `coordinate.Link` (a worker's) and a
    `driver.Calls` (the driver's): awaited, or sent and not waited for."""

    def __init__(self, actor: Any):
        self.actor = actor

    def now(self):
        return self.actor.now.remote()

    def ready(self, worker: int):
        return self.actor.ready.remote(worker)

    def started(self):
        return self.actor.started.remote()

    def arrive(self, worker: int, k: int):
        return self.actor.arrive.remote(worker, k)

    def all_arrived(self, k: int):
        return self.actor.all_arrived.remote(k)

    def open(self, k: int) -> None:
        self.actor.open.remote(k)

    def take(self, worker: int, session: str):
        return self.actor.take.remote(worker, session)

    def give_back(self, worker: int, session: str) -> None:
        self.actor.give_back.remote(worker, session)

    def drained(self, worker: int, epoch: int) -> None:
        self.actor.drained.remote(worker, epoch)

    def watch(self, worker: int, version: int):
        return self.actor.watch.remote(worker, version)

    def gone(self, worker: int) -> None:
        self.actor.gone.remote(worker)


class ShardActor:
    """One worker: runs one shard on its own event loop (`shard.run_shard`)."""

    def __init__(self, coordinator: Any):
        self.link = ActorCalls(coordinator)
        self.task: asyncio.Future | None = None

    def where(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(),
                "node_id": ctx.get_node_id()}

    async def run(self, job: ShardJob):
        queue: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.ensure_future(run_shard(job, self.link, queue.put_nowait))
        async for batch in batches(self.task, queue):
            yield batch

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


# the actor classes as Ray makes them (`.options(...).remote(...)`)
COORDINATOR = ray.remote(num_cpus=0)(CoordinatorActor)
SHARD = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(ShardActor)


class RayBackend:
    """A `driver.Backend` of Ray actors: the coordinator on the driver's node, one
    `ShardActor` per shard."""

    def __init__(self, workers: int, barriers: int):
        here = ray.get_runtime_context().get_node_id()
        self.coord_actor = COORDINATOR.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(workers, barriers)
        self.coordinator = ActorCalls(self.coord_actor)
        self.actors: dict[int, Any] = {}

    def launch(self, job: ShardJob):
        actor = SHARD.options(scheduling_strategy="SPREAD").remote(self.coord_actor)
        self.actors[job.index] = actor
        return self._stream(actor.run.remote(job))

    async def _stream(self, refs):
        async for ref in refs:
            yield await ref

    async def where(self, worker: int) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self.actors[worker].where.remote(), WHERE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise RuntimeError(f"did not start within {WHERE_TIMEOUT_S:g} s (no free CPU on "
                               "the cluster?)") from None

    def stop(self, worker: int) -> None:
        actor = self.actors.get(worker)
        if actor is not None:
            actor.stop.remote()

    async def close(self) -> None:
        for actor in [*self.actors.values(), self.coord_actor]:
            ray.kill(actor, no_restart=True)


def connect(address: str | None, workers: int) -> None:
    """Join the Ray cluster at `address`, else start a local Ray instance with a CPU for every
    worker (or use the one this process has already joined). Raises `ScaleError`."""
    if ray.is_initialized():
        return
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "error"}
    if address:
        check_reachable(address)
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScaleError(f"cannot start the workers on {where}: {first}") from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise `ScaleError` when `address` names a host and port (`HOST:PORT`, `ray://HOST:PORT`)
    that takes no TCP connection within `timeout_s` (Ray itself would wait for it without
    end). Other forms (`auto`) are left to Ray."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ScaleError(f"cannot reach the Ray cluster at {address}: "
                         f"{exc.strerror or exc}") from None


def other_nodes() -> bool:
    """Whether the cluster has a live node other than the driver's."""
    here = ray.get_runtime_context().get_node_id()
    return any(n.get("Alive") and n.get("NodeID") != here for n in ray.nodes())


def worker_url(base_url: str, sim: bool) -> str:
    """The engine's base URL as the workers reach it (see the module). Raises `ScaleError`."""
    parts = urlsplit(base_url)
    if parts.hostname not in LOOPBACK or not other_nodes():
        return base_url
    if not sim:
        raise ScaleError(
            f"--base-url {base_url} is this machine's loopback: workers on the Ray cluster's "
            "other nodes cannot reach it; give the engine's address on the network")
    host = ray.util.get_node_ip_address()
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}"))


async def run(plan, engine, sink, options=None, *, workers: int, address: str | None = None):
    """The sharded run on Ray (see the module), called as `api.run_workload` is. Output:
    `results.Results`."""
    from workloadlang.scale.driver import run_sharded

    connect(address, workers)
    url = worker_url(engine.endpoint.base_url, bool(engine.sim))

    async def backend_for(n: int, barriers: int) -> RayBackend:
        return RayBackend(n, barriers)

    return await run_sharded(plan, engine, sink, backend_for, options, workers=workers,
                             worker_url=url)
