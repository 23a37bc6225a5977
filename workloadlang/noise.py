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

The decode pace says how much slower the machine ran for a request (`Record.drift`), and a time
that drifted is read as a range down to what it would have been at the anchor's speed
(`gates.widened`). The decode pace can overstate what slowed a prefill: on a CPU shared with
other work, a short decode waits for a time slice at every token and slows far more than a long
prefill does. Identical requests of a stretch price the same work, so each one's range holds
the same price: where at least `MIN_TWINS` of them were kept and their prefill times agree
(within `DRIFT_ALLOWANCE`), the price is at least the second highest of their ranges' lower
ends, and the range of one that slowed down reaches no lower (`twin_drifts`). The second, not
the highest: a drift that ends during one of them leaves that one a slow prefill and a decode
that shows less of it, a lower end too high; one edge per drift, and the others' ranges still
hold the price.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from workloadlang.results import DRIFT_ALLOWANCE, Record

MIN_OWN = 32  # new tokens, at least, of identical requests whose prefill times must agree
MIN_TWINS = 3  # identical requests kept, at least, to price them together


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
    out: dict[str, Noise] = {}
    for (anchor, *_), rs in twins(records, steady).items():
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


def twins(records: Iterable[Record], keep: Callable[[float | None], bool]
          ) -> dict[tuple[str, str, str, int, int], list[Record]]:
    """Output: the identical requests of each stretch (anchor, session, label, planned prompt
    and new tokens, at least `MIN_OWN` of them), timed alone, answered, with a prefill time and
    a drift that `keep` accepts."""
    groups: dict[tuple[str, str, str, int, int], list[Record]] = {}
    for r in records:
        if r.drift_of is None or not r.isolated or r.new_tokens < MIN_OWN or r.error \
                or r.prefill_s is None or not keep(r.drift):
            continue
        key = (r.drift_of, r.session, r.label, r.planned_prompt_tokens, r.new_tokens)
        groups.setdefault(key, []).append(r)
    return groups


def twin_drifts(records: Iterable[Record], floor: float) -> dict[str, float]:
    """Output: record id -> the drift its time is read at (`gates.widened`), for identical
    requests of a stretch, at least `MIN_TWINS` of them, whose prefill times (plus `floor`)
    agree within `DRIFT_ALLOWANCE`, for those that decoded slower than their anchor: at most
    its own, and no more than takes its range down to the second highest of the group's lower
    ends (see the module; a request that did not drift is its own lower end, one that ran
    faster reaches up from its own). A request not in the output is read at its own drift."""
    out: dict[str, float] = {}
    for rs in twins(records, lambda _: True).values():
        times = sorted((r.prefill_s or 0.0) + floor for r in rs)
        if len(rs) < MIN_TWINS or times[-1] > DRIFT_ALLOWANCE * times[0]:
            continue
        low = sorted(lower_end(r) for r in rs)[-2]
        for r in rs:
            if low > 0 and not steady(r.drift) and (r.drift or 1.0) > 1:
                out[r.id] = max(1.0, min(r.drift or 1.0, (r.prefill_s or 0.0) / low))
    return out


def lower_end(r: Record) -> float:
    """Output: the least `r`'s prefill time is read as (`gates.widened`): itself when `r` did
    not drift or ran faster than its anchor, else down by its drift."""
    p = r.prefill_s or 0.0
    return p if steady(r.drift) else p / max(r.drift or 1.0, 1.0)
