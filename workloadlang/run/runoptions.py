"""How one run of a plan is to go, beyond the plan itself (`api.run_workload`'s `options`).

Input: what the caller decides (the command line, a distributed run's driver). Output: a frozen
`RunOptions`, plain data: it can be shipped to another process and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `wl plan` imports these options, and nothing of the HTTP client
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
    """

    time_budget_s: float | None = None
    isolation: bool = True
    sessions: frozenset[str] | None = None
    start_at_unix: float | None = None
    calibration: Calibration | None = None
