"""`wl run`'s options for a sharded run, and what the command does with them.

Input: the `wl run` parser (`add_scale_args`), its parsed args. Output: `--workers N` and
`--ray ADDRESS`; why they cannot be used (`problem`: Ray not installed, exit 2); the function
that runs the plan (`runner_for`: `api.run_workload`, or the run on Ray workers); the address the
embedded simulator listens on (`sim_host`). Ray is imported only when `--workers` is given.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any, Callable

from workloadlang.scale import ScaleError

__all__ = ["ScaleError", "add_scale_args", "problem", "runner_for", "sim_host"]

INSTALL_HINT = "pip install 'workloadlang[ray]'"


def worker_count(text: str) -> int:
    """An argparse type: a whole number of workers, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of workers, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def add_scale_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=worker_count, metavar="N",
                   help="shard the run by session over N Ray workers, merged into one result "
                        f"(needs Ray: {INSTALL_HINT}; docs/scale-out.md)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="the Ray cluster to run the workers on (default: a local Ray instance "
                        "started for the run)")


def problem(args: argparse.Namespace) -> str | None:
    """Why the sharded-run options cannot be used, or None."""
    if args.ray and not args.workers:
        return "--ray needs --workers N"
    if not args.workers:
        return None
    try:
        import ray  # noqa: F401
    except ImportError:
        return (f"--workers runs on Ray, which is not installed: {INSTALL_HINT} "
                "(or pip install ray)")
    return None


def sim_host(args: argparse.Namespace) -> str:
    """The address `--sim` listens on: every interface when the workers may run on other
    machines (`--ray`), else the loopback."""
    return "0.0.0.0" if args.workers and args.ray else "127.0.0.1"


def runner_for(args: argparse.Namespace) -> Callable[..., Any]:
    """Output: `api.run_workload`, or with `--workers` the run on Ray workers; both called as
    `(plan, engine, sink, options)`."""
    if not args.workers:
        from workloadlang import api

        return api.run_workload
    from workloadlang.scale import ray_run

    return partial(ray_run.run, workers=args.workers, address=args.ray)
