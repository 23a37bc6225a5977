"""The workers a run asks for (`wl run --workers N [--ray ADDRESS]`), and what that means.

Input: `Workers` (how many, on which Ray cluster). Output: why they cannot be used (`problem`:
Ray not installed, exit 2); the function that runs the plan (`runner_for`: `api.run_workload`,
or the run on Ray workers); the address the embedded simulator listens on (`sim_host`). Ray is
imported only when workers are asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from workloadlang.scale import ScaleError

__all__ = ["INSTALL_HINT", "ScaleError", "Workers", "problem", "runner_for", "sim_host"]

INSTALL_HINT = "pip install 'workloadlang[ray]'"


@dataclass(frozen=True)
class Workers:
    """`count` Ray workers to shard the run over (None: the run in this process), on the Ray
    cluster at `address` (None: a local Ray instance started for the run)."""

    count: int | None = None
    address: str | None = None


def problem(workers: Workers) -> str | None:
    """Why the workers asked for cannot be used, or None."""
    if workers.address and not workers.count:
        return "--ray needs --workers N"
    if not workers.count:
        return None
    try:
        import ray  # noqa: F401
    except ImportError:
        return (f"--workers runs on Ray, which is not installed: {INSTALL_HINT} "
                "(or pip install ray)")
    return None


def sim_host(workers: Workers) -> str:
    """The address `--sim` listens on: every interface when the workers may run on other
    machines (a Ray cluster's address given), else the loopback."""
    return "0.0.0.0" if workers.count and workers.address else "127.0.0.1"


def runner_for(workers: Workers) -> Callable[..., Any]:
    """Output: `api.run_workload`, or with workers the run on Ray workers; both called as
    `(plan, engine, sink, options)`."""
    if not workers.count:
        from workloadlang import api

        return api.run_workload
    from workloadlang.scale import ray_run

    return partial(ray_run.run, workers=workers.count, address=workers.address)
