"""The `wl` commands' requests: the parsed command line turned into frozen, typed data before
a command does anything, so nothing past `cli/` sees an `argparse.Namespace`.

Input: argparse's `Namespace` (and the words it left, a workload's param flags). Output:
`CheckRequest`, `PlanRequest`, `RunRequest`, `ProbeRequest`, `ServeRequest`, and the requests of the commands
below the command line (`compare.CompareRequest`, `report.ReportRequest`). Raises `UsageError`
(exit 2) for what only shows once the values are put together (`--cache-block` without
`--cache-tokens`, an API key's variable not set, a simulator option out of range).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import SecretStr

from workloadlang.cli.arguments import DEFAULT_CACHE_BLOCK
from workloadlang.plan.limits import Limits
from workloadlang.plan.model import CacheModel
from workloadlang.scale.workers import Workers

if TYPE_CHECKING:
    from workloadlang.probe import ProbeOptions
    from workloadlang.sim import SimConfig


class UsageError(Exception):
    """What the command line got wrong (exit 2); the message says what."""


@dataclass(frozen=True)
class CheckRequest:
    """`wl check`: the files (or bundled names) and how diagnostics are shown."""

    workloads: tuple[str, ...]
    format: str = "text"


@dataclass(frozen=True)
class PlanRequest:
    """What `wl plan` and `wl run` plan: the workload (a path or a bundled name), the `-p` pairs
    and the param flags (`--kv-size 8k`, read once the workload's params are known), `--sweep`,
    `--salt`, `--max-context`, the planner's limits, the LRU cache (`--cache-tokens`), how
    diagnostics are shown; `wl plan`'s view (`json`, `full`)."""

    workload: str
    pairs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    sweep: str | None = None
    salt: str | None = None
    max_context: int | None = None
    limits: Limits = Limits()
    cache: CacheModel | None = None
    format: str = "text"
    json: bool = False
    full: bool = False


@dataclass(frozen=True)
class SearchRequest:
    """`--search NAME=LOW..HIGH`, `--search-precision`, `--search-runs`."""

    range: str
    precision: float = 0.05
    runs: int = 12


@dataclass(frozen=True)
class RunRequest:
    """`wl run`: what to plan, the engine (`base_url`, or the simulator `sim` with its preset
    named), how to reach it, the files to write, the run's options, a rate search, the
    workers, the view (`viz` None: live on a terminal)."""

    plan: PlanRequest
    base_url: str = "http://localhost:8000/v1"
    model: str | None = None
    api_key: SecretStr | None = None
    cached_zero_when_absent: bool = False
    sim: SimConfig | None = None
    sim_preset: str | None = None
    output: str | None = None
    records: str | None = None
    report: str | None = None
    time_budget_s: float | None = None
    idle_timeout_s: float = 60.0
    engine_log: str | None = None
    search: SearchRequest | None = None
    isolation: bool = True
    workers: Workers = Workers()
    viz: bool | None = None


@dataclass(frozen=True)
class ProbeRequest:
    """`wl probe`: the engine (`url`, or the simulator `sim` with its preset named), how to
    reach it, the experiments' options (budgets, idle gaps, KV bytes per token, salt), the
    files to write; or `compare`, two cards' paths (nothing is sent)."""

    options: ProbeOptions
    url: str | None = None
    sim: SimConfig | None = None
    sim_preset: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    output: str | None = None
    report: str | None = None
    compare: tuple[str, str] | None = None


@dataclass(frozen=True)
class ServeRequest:
    """`wl sim serve`: where to listen and the simulator to serve (its preset named)."""

    host: str
    port: int
    sim: SimConfig
    preset: str


def check_request(args: argparse.Namespace) -> CheckRequest:
    """`wl check`'s arguments."""
    return CheckRequest(workloads=tuple(args.workloads), format=args.format)


def plan_request(args: argparse.Namespace, extra: Sequence[str]) -> PlanRequest:
    """`wl plan`'s arguments; `extra`: the words argparse left (the workload's param flags)."""
    return planning(args, extra, format=args.format, json=args.json, full=args.full)


def planning(args: argparse.Namespace, extra: Sequence[str], format: str = "text",
             json: bool = False, full: bool = False) -> PlanRequest:
    """The planning arguments `wl plan` and `wl run` share, with `wl plan`'s view."""
    return PlanRequest(
        workload=args.workload, pairs=tuple(args.param or ()), flags=tuple(extra),
        sweep=args.sweep, salt=args.salt, max_context=args.max_context,
        limits=Limits(requests=args.max_requests, request_tokens=args.max_request_tokens,
                      total_tokens=args.max_total_tokens),
        cache=cache_model(args.cache_tokens, args.cache_block), format=format, json=json,
        full=full)


def cache_model(tokens: int | None, block: int | None) -> CacheModel | None:
    """The LRU cache of `--cache-tokens` / `--cache-block`, or None."""
    if tokens is None:
        if block is not None:
            raise UsageError("--cache-block needs --cache-tokens")
        return None
    return CacheModel(tokens=tokens, block=block or DEFAULT_CACHE_BLOCK)


def run_request(args: argparse.Namespace, extra: Sequence[str]) -> RunRequest:
    """`wl run`'s arguments. Raises `UsageError`: `--api-key-env` names a variable not set, a
    simulator option is out of its range."""
    sim, preset = run_sim(args) if args.sim else (None, None)
    search = None if args.search is None else SearchRequest(
        args.search, args.search_precision, args.search_runs)
    return RunRequest(
        plan=planning(args, extra), base_url=args.base_url, model=args.model,
        api_key=api_key(args.api_key, args.api_key_env),
        cached_zero_when_absent=args.cached_zero_when_absent, sim=sim, sim_preset=preset,
        output=args.output, records=args.records, report=args.report,
        time_budget_s=args.time_budget, idle_timeout_s=args.idle_timeout,
        engine_log=args.engine_log, search=search, isolation=not args.no_isolation,
        workers=Workers(count=args.workers, address=args.ray), viz=args.viz)


def api_key(key: str | None, variable: str | None) -> SecretStr | None:
    """`--api-key`, or the value of the variable `--api-key-env` names; None for neither."""
    if key:
        return SecretStr(key)
    if variable:
        value = os.environ.get(variable)
        if not value:
            raise UsageError(f"--api-key-env {variable}: not set")
        return SecretStr(value)
    return None


def sim_config(args: argparse.Namespace, preset: str,
               prefix: str = "sim-") -> tuple[SimConfig, str]:
    """The simulator `--sim` (or `wl sim serve`) asks for, from `preset` unless
    `--sim-preset` names another, and that preset's name. Raises `UsageError` naming the flag
    of a value out of its range."""
    from workloadlang.sim import config_from_args

    chosen = args.sim_preset or preset
    try:
        return config_from_args(argparse.Namespace(**{**vars(args), "sim_preset": chosen})), \
            chosen
    except ValueError as exc:
        raise UsageError(config_error(exc, prefix)) from None


def run_sim(args: argparse.Namespace) -> tuple[SimConfig, str]:
    """`wl run --sim`'s simulator: the preset of the workload's name when there is one."""
    from workloadlang.sim import PRESETS

    return sim_config(args, args.workload if args.workload in PRESETS else "default")


def probe_request(args: argparse.Namespace, extra: Sequence[str]) -> ProbeRequest:
    """`wl probe`'s arguments. Raises `UsageError`: words left over, `--api-key-env` names a
    variable not set, a simulator option is out of its range."""
    from workloadlang.plan.draws import fresh_salt
    from workloadlang.probe import ProbeOptions

    if extra:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    options = ProbeOptions(budget_tokens=args.budget_tokens, time_budget_s=args.time_budget,
                           idle_gaps_s=args.idle,
                           kv_bytes_per_token=args.kv_bytes_per_token or args.kv_shape,
                           salt=args.salt or fresh_salt())
    if args.compare:
        return ProbeRequest(options=options, compare=(args.compare[0], args.compare[1]))
    sim, preset = sim_config(args, "default") if args.sim else (None, None)
    return ProbeRequest(options=options, url=None if args.sim else args.url, sim=sim,
                        sim_preset=preset, model=args.model,
                        api_key=api_key(args.api_key, args.api_key_env), output=args.output,
                        report=args.report)


def serve_request(args: argparse.Namespace) -> ServeRequest:
    """`wl sim serve`'s arguments; a simulator option out of range: `UsageError`."""
    sim, preset = sim_config(args, "default", prefix="")
    return ServeRequest(host=args.host, port=args.port, sim=sim, preset=preset)


def config_error(exc: ValueError, prefix: str = "") -> str:
    """A simulator configuration error in one line, naming the flag (pydantic's errors name the
    field: `device_tokens` is `--device-tokens`)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    flag = f"--{prefix}{field.replace('_', '-')}" if field and field != "faults" else \
        f"--{prefix}fault"
    return f"{flag}: {first['msg'].lower()}, got {first.get('input')!r}"
