"""Where the probe's experiments run: each one an ordinary run of a bundled `probes/NAME`
workload through the public API (`api.make_plan`, `api.run_workload`), against one engine.

Input: an open engine (`api.open_engine`), the probe's options (`ProbeOptions`) and a progress
callback. Output: per experiment its records (`Record`s) and its `card.Experiment` (params,
salt, cost), the probe's running cost, and every request it sent as the hypothesis caches see
it (`ledger`: `model.Prompt`s, in the order they were sent).

The budgets are kept here: a run whose worst case (every prompt prefilled cold) does not fit
in what `--budget-tokens` has left is not sent (`OutOfBudget`), and each run gets what is left
of `--time-budget` as its own time budget. The first run calibrates how to size text for the
engine; every later run reuses that calibration and sends no calibration request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workloadlang import api
from workloadlang.card import Cost, Experiment
from workloadlang.probe.hypotheses import Prompt
from workloadlang.results import ListSink, Record


@dataclass(frozen=True)
class ProbeOptions:
    """What `wl probe` was asked: `budget_tokens` (None: no bound), `time_budget_s`, the idle
    gaps in seconds, the KV cache's bytes per token (for GB/s), the base salt."""

    budget_tokens: int | None = None
    time_budget_s: float | None = None
    idle_gaps_s: tuple[float, ...] = (1.0, 10.0)
    kv_bytes_per_token: float | None = None
    salt: str = "probe"


class OutOfBudget(Exception):
    """An experiment did not fit in what the budget has left; the message says which and why."""


class OutOfTime(Exception):
    """The time budget ran out before an experiment could start."""


class ProgressSink(ListSink):
    """Keeps a run's records and tells `progress` each one as it lands."""

    def __init__(self, tick: Callable[[Record], None]) -> None:
        super().__init__()
        self.tick = tick

    def record(self, rec: Record) -> None:
        super().record(rec)
        self.tick(rec)


@dataclass
class Lab:
    """One probe's runs against one engine (see the module)."""

    engine: Any
    options: ProbeOptions
    progress: Callable[[dict[str, Any]], None] = lambda event: None
    clock: Callable[[], float] = time.monotonic
    cost: Cost = field(default_factory=Cost)
    experiments: list[Experiment] = field(default_factory=list)
    ledger: list[Prompt] = field(default_factory=list)
    calibration: Any = None
    started: float = 0.0
    current: str = ""
    running: list[int] = field(default_factory=lambda: [0, 0])

    def __post_init__(self) -> None:
        self.started = self.clock()

    # ---------------------------------------------------------------- budgets

    @property
    def tokens_left(self) -> int | None:
        budget = self.options.budget_tokens
        return None if budget is None else budget - self.cost.prefilled_tokens

    @property
    def time_left(self) -> float | None:
        budget = self.options.time_budget_s
        return None if budget is None else budget - (self.clock() - self.started)

    def affordable(self, tokens: int) -> bool:
        """True when `tokens` more prefilled tokens fit in the budget."""
        left = self.tokens_left
        return left is None or tokens <= left

    @property
    def max_context(self) -> int | None:
        return self.engine.info.max_context

    # ---------------------------------------------------------------- one run

    async def run(self, name: str, params: Mapping[str, Any], salt: str, *,
                  worst_tokens: int) -> list[Record]:
        """Run `probes/NAME` with `params` (values as `wl run` flags take them) and `salt`.
        `worst_tokens`: the most it can make the engine prefill. Output: its records, in plan
        order. Raises `OutOfBudget`, `OutOfTime`."""
        if not self.affordable(worst_tokens):
            raise OutOfBudget(f"{name} could prefill {worst_tokens:,} tokens, the budget has "
                              f"{self.tokens_left:,} left")
        left = self.time_left
        if left is not None and left <= 0:
            raise OutOfTime(f"the time budget ran out before {name}")
        self.current = name
        source = api.load(f"probes/{name}")
        overrides = {k: flag_value(v) for k, v in params.items()}
        plan = api.make_plan(api.parse_checked(source), source, overrides, salt=salt,
                             env={"max_context": self.max_context})
        sink = ProgressSink(self._tick)
        self.running = [0, 0]  # this run's requests and prefilled tokens so far
        if self.calibration is None:
            self.calibration = await api.calibrate(plan, self.engine, sink)
        t0 = self.clock()
        # every request once: the hypothesis caches model each one the engine sees, and a
        # request measured again would be one they do not (or a first send kept as a hit)
        results = await api.run_workload(plan, self.engine, sink, api.RunOptions(
            time_budget_s=left, calibration=self.calibration, measure_again=False))
        self._account(name, plan, results, overrides, salt, self.clock() - t0)
        return list(results.records)

    def _account(self, name: str, plan: Any, results: Any, params: dict[str, str], salt: str,
                 wall: float) -> None:
        sent = [r for r in results.records if not r.skipped]
        prompt = sum(r.prompt_tokens or planned(r) for r in sent)
        prefilled = sum(prefilled_by(r) for r in sent)
        self.cost.requests += len(sent)
        self.cost.prompt_tokens += prompt
        self.cost.prefilled_tokens += prefilled
        self.cost.wall_s = round(self.clock() - self.started, 3)
        self.experiments.append(Experiment(
            name=name, workload=f"probes/{name}", salt=salt, params=params, requests=len(sent),
            prompt_tokens=prompt, prefilled_tokens=prefilled, wall_s=round(wall, 3),
            exit_code=int(results.exit_code), note=results.incomplete))

    def _tick(self, rec: Record) -> None:
        if not rec.skipped:
            self.running[0] += 1
            self.running[1] += prefilled_by(rec)
        self.progress({"experiment": self.current,
                       "requests": self.cost.requests + self.running[0],
                       "prefilled": self.cost.prefilled_tokens + self.running[1],
                       "elapsed_s": self.clock() - self.started, "record": rec.id})


def planned(r: Record) -> int:
    return r.planned_prompt_tokens


def prefilled_by(r: Record) -> int:
    """What a sent request made the engine prefill: its uncached tokens as reported, else its
    whole prompt (a request cut or failed: what it may have cost)."""
    prompt = r.prompt_tokens if r.prompt_tokens is not None else r.planned_prompt_tokens
    if r.cached_tokens is None:
        return prompt
    return max(0, prompt - r.cached_tokens)


def flag_value(v: Any) -> str:
    """A param's value as `wl run` takes it on the command line (lists comma-separated,
    durations in seconds)."""
    if isinstance(v, (list, tuple)):
        return ",".join(flag_value(x) for x in v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
