"""How one run of a plan is to go, beyond the plan itself (`api.run_workload`'s `options`).

Input: what the caller decides (the command line, a distributed run's driver). Output: a frozen
`RunOptions`, plain data: it can be shipped to another process and back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `wl plan` imports these options, and nothing of the HTTP client
    from workloadlang.plan.model import Plan
    from workloadlang.run.calibrate import Calibration


@dataclass(frozen=True)
class RunOptions:
    """- `time_budget_s`: stop sending after this many seconds of the run (it is then
      incomplete, exit 4); None: no budget.
    - `isolation`: False sends the requests the plan marks `isolated` with the others (a load
      test: the verdicts that read them may then be unknown; `wl run --no-isolation`).
    - `sessions`: run only these sessions of the plan (a shard of a distributed run: a session
      never splits); None: every session.
    - `start_at_unix`: the wall-clock instant (`time.time()`) the run's clock starts at, after
      calibration (the shards of one run start together); None: as soon as it is ready.
    - `calibration`: use this calibration (how text is sized, the TTFT reference) instead of
      measuring one: a shard of a distributed run uses its driver's, and sends no calibration
      request; None: calibrate against the engine.
    - `replan`: the plan made again with what the calibration learnt about the engine (its
      built-in refs, `$timing_tokens`: `api.Replan`), for a workload that sizes its decisive
      requests by them; called by the process that calibrates, never shipped. None: the plan
      runs as given.
    - `measure_again`: False sends every request once (no isolated request is measured again,
      `run/remeasure.py`): for a driver that models every request the engine sees (`wl probe`);
      True: as the module says.
    """

    time_budget_s: float | None = None
    isolation: bool = True
    sessions: frozenset[str] | None = None
    start_at_unix: float | None = None
    calibration: Calibration | None = None
    replan: Callable[[Mapping[str, Any]], Plan] | None = None
    measure_again: bool = True
