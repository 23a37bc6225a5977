"""Metric selectors (`ttft{main, warm, last 3}`): which requests a gate or report item reads.

Input: planned requests (or run records that carry one) and an `ir.SelItem` tuple.
Output: the selected items, in schedule order.

The planner applies only the static part (names, labels, phases, sessions,
`warm`/`cold`/`probe`/`isolated`, windows), to prove at plan time that every gate reads something; gates apply the run-time flags
(`hit`, `miss`, `aborted`, `ok`, `error`) as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from workloadlang import ir
from workloadlang.evaluate import evaluate, is_number

T = TypeVar("T")


class PRequest(Protocol):
    """What a selector reads of a planned request (`plan.model.PRequest` has it): the
    selector sits below the planner, so it names the fields, not the planner's class."""

    # read-only: the planner's requests are frozen models
    @property
    def label(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def session(self) -> str: ...
    @property
    def session_name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def isolated(self) -> bool: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def expected_cached(self) -> int: ...


R = TypeVar("R", bound=PRequest)


STATIC_FLAGS = frozenset({"warm", "cold", "probe", "isolated"})
DYNAMIC_FLAGS = frozenset({"hit", "miss", "aborted", "ok", "error"})
FLAGS = STATIC_FLAGS | DYNAMIC_FLAGS


def gate_metric_refs(g: ir.Gate | ir.ReportItem) -> list[ir.MetricRef]:
    """Every metric reference in a gate (both sides, and its `when` condition's) or report
    item."""
    out: list[ir.MetricRef] = []
    when = getattr(g, "when", None)
    for e in (getattr(g, "left", None), getattr(g, "right", None), getattr(g, "value", None),
              when and when.left, when and when.right):
        out.extend(metric_refs(e))
    return out


def test_refs(g: ir.Gate) -> list[ir.MetricRef]:
    """The metric references of a gate's own test (both sides), not of its condition."""
    return metric_refs(g.left) + metric_refs(g.right)


def metric_refs(e: ir.GExpr | None) -> list[ir.MetricRef]:
    """Every metric reference in a gate expression (none for a number or no expression)."""
    if e is None or isinstance(e, ir.GNum):
        return []
    if isinstance(e, ir.MetricRef):
        return [e]
    if isinstance(e, ir.Agg):
        return [e.arg]
    if isinstance(e, ir.GCall):
        return [m for a in e.args for m in metric_refs(a)]
    return metric_refs(e.left) + metric_refs(e.right)


def is_warm(r: PRequest) -> bool:
    """A request a perfect cache would serve at least half of."""
    return 2 * r.expected_cached >= r.prompt_tokens > 0


def phase_name(phase: str) -> str:
    """The phase statement's name of a phase run: `grow#2` (its third run in a loop) is
    `grow`."""
    return phase.partition("#")[0]


def static_match(r: PRequest, item: ir.SelItem) -> bool:
    key, v = item.key, item.value
    if key == "name":  # a bare name is a label or a phase; sessions need `session=`
        return v == r.label or v == phase_name(r.phase)
    if key == "label":
        return r.label == v
    if key == "phase":
        return phase_name(r.phase) == v
    if key == "session":
        return v in (r.session_name, r.session)
    if key == "flag" and v in STATIC_FLAGS:
        return {"warm": is_warm(r), "cold": not is_warm(r), "probe": r.kind == "probe",
                "isolated": r.isolated}[v]
    return True


def select(items: Iterable[T], selector: Sequence[ir.SelItem], env: Mapping[str, Any],
           req_of: Callable[[T], PRequest],
           flag_of: Callable[[T, str], bool] | None = None) -> list[T]:
    """Filter by every item, then apply the `last N` / `first N` windows in order."""
    filters = [i for i in selector if i.key not in ("last", "first")]
    picked = [x for x in items if all(keep(x, i, req_of, flag_of) for i in filters)]
    for w in (i for i in selector if i.key in ("last", "first")):
        count = evaluate(w.count, env) if w.count is not None else 1
        assert is_number(count)  # checked: a window's count is a number
        n = int(count)
        picked = picked[-n:] if w.key == "last" and n > 0 else picked[:max(n, 0)] if w.key == "first" else []
    return picked


def keep(x: T, item: ir.SelItem, req_of, flag_of) -> bool:
    if item.key == "flag" and item.value in DYNAMIC_FLAGS:
        return True if flag_of is None else bool(flag_of(x, item.value))
    return static_match(req_of(x), item)


def select_static(reqs: Iterable[R], selector: Sequence[ir.SelItem],
                  env: Mapping[str, Any]) -> list[R]:
    """The planned requests `selector` picks by what is known before a run (its static part)."""
    return select(reqs, selector, env, lambda r: r)
