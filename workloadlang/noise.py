"""What identical requests of one stretch timed alone say about the machine's speed in it.

Input: a run's `Record`s and what a timing resolves here (`$timing_floor`).
Output: per request that began a stretch timed alone (an anchor: agent-sim's finalize), the
`Noise` of its stretch when the fastest of its identical requests is not confirmed by another.

Requests of a stretch that repeat the same work (the same session, label, planned prompt and
new tokens, at least `MIN_OWN` of them new: agent-sim's baselines) and that did not drift from
the anchor by their decode pace (`Record.drift`, read for itself) should take the same prefill
time. Noise only adds time, so the fastest of them prices the anchor, and it is the machine's
speed when a second one comes within `DRIFT_ALLOWANCE` of it; a slower one beside them is
noise (the runner measured it again, `run.remeasure`). When the second fastest is further off
even so, the fastest ran at a speed the machine had only for a moment, in a way the decode
pace did not show, and the anchor, which nothing can repeat, may have run at the other: its
times are read as ranges down to what they would have been that much faster
(`gates.metric_value`). A gate judged on them is then `unknown` where that could decide it,
and still fails where even the faster end fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workloadlang.results import DRIFT_ALLOWANCE, Record

MIN_OWN = 32  # new tokens, at least, of identical requests whose prefill times must agree


@dataclass(frozen=True)
class Noise:
    """How far apart the two fastest of identical requests of one stretch took (`factor`, over
    `DRIFT_ALLOWANCE`: the second's prefill time plus the floor over the fastest's), which two
    (`fast`, `slow`), and the sends the stretch's identical requests took (`attempts`)."""
    factor: float
    fast: str
    slow: str
    attempts: int

    def detail(self, anchor: str) -> str:
        """Output: the noise said for a gate's detail."""
        tries = f"{self.attempts} send{'s' if self.attempts != 1 else ''}"
        return (f"{anchor}'s stretch ran at speeds {self.factor:.2g}x apart: {self.fast}, the "
                f"fastest of the same work, was not confirmed ({self.slow} the next, after "
                f"{tries})")


def noise_of(records: Iterable[Record], floor: float) -> dict[str, Noise]:
    """Output: anchor id -> the widest `Noise` of its stretch's groups of identical requests,
    for the anchors where the fastest is not confirmed (see the module). `floor`: seconds a
    timing resolves, added to each prefill time so that two times near nothing do not
    disagree by their noise."""
    groups: dict[tuple[str, str, str, int, int], list[Record]] = {}
    for r in records:
        if r.drift_of is None or not r.isolated or r.new_tokens < MIN_OWN or r.error \
                or r.prefill_s is None or not steady(r.drift):
            continue
        key = (r.drift_of, r.session, r.label, r.planned_prompt_tokens, r.new_tokens)
        groups.setdefault(key, []).append(r)
    out: dict[str, Noise] = {}
    for (anchor, *_), rs in groups.items():
        if len(rs) < 2:
            continue
        fast, slow = sorted(rs, key=lambda r: r.prefill_s or 0.0)[:2]
        factor = ((slow.prefill_s or 0.0) + floor) / ((fast.prefill_s or 0.0) + floor)
        if factor > DRIFT_ALLOWANCE and (anchor not in out or factor > out[anchor].factor):
            out[anchor] = Noise(factor, fast.id, slow.id, sum(r.attempts for r in rs))
    return out


def steady(drift: float | None) -> bool:
    """Output: True when a request decoded within `DRIFT_ALLOWANCE` of its anchor's pace
    (`drift`: how many times slower, `Record.drift`), or has no decode pace to say it did not."""
    return drift is None or 1 / DRIFT_ALLOWANCE <= drift <= DRIFT_ALLOWANCE
