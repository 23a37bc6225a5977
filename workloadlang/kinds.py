"""The kinds of values and metrics, and how they combine (docs/language.md, "Units").

Input: kinds as strings (`number`, `duration`, `ratio`, `bool`, `string`, `object`, `null`,
`any`, and lists of these as `list:KIND`). Output: the kind of an arithmetic result
(`arith_kind`), of a list's items (`common_kind`), whether two kinds compare (`comparable`),
whether a value fits a place (`fits`), and how a message names a kind (`describe`). The tables
say the kind of each per-request metric, calibration result, param type and setting.
`workloadlang.check` applies them to a workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloadlang import ir
from workloadlang.evaluate import MAX_CONTEXT, TIMING_TOKENS

_DURATION_METRICS = ("ttft", "ttft_content", "e2e", "server_ttft", "ttft_per_uncached",
                     "prefill_time", "isolation_wait", "schedule_lag", "itl", "tpot")
_NUMBER_METRICS = ("prompt_tokens", "planned_prompt_tokens", "cached_tokens", "expected_cached",
                   "missed", "uncached_tokens", "completion_tokens", "streamed_tokens", "pp", "tg",
                   "prefill_work", "output_tps")
_FLAG_METRICS = ("hit", "miss", "error", "aborted", "ok", "cold_ok", "cached_reported",
                 "ttft_agrees", "ttft_disagrees", "slo_met")
METRICS: dict[str, str] = {**dict.fromkeys(_DURATION_METRICS, "duration"),
                           **dict.fromkeys(_NUMBER_METRICS, "number"), "reuse": "ratio",
                           **dict.fromkeys(_FLAG_METRICS, "bool")}
"""Per-request metric -> kind of its values (`ttft_per_uncached` is seconds per token; `itl`
has one value per gap between a request's token events)."""

AGGREGATIONS = ("median", "mean", "min", "max", "sum", "count", "p50", "p90", "p95", "p99",
                "all", "any", "fraction", "rate")
CALIBRATION_REFS = {"ttft_threshold": "ttft_threshold", "cold_ttft": "ttft_threshold",
                    "hit_ttft": "ttft_threshold", "timing_floor": "ttft_threshold",
                    "chars_per_token": "chars_per_token"}
"""Run-time results usable in gates and report -> the `calibrate` step that measures them."""
CALIBRATION_KINDS = {"ttft_threshold": "duration", "cold_ttft": "duration",
                      "hit_ttft": "duration", "timing_floor": "duration",
                      "chars_per_token": "number"}
BUILTIN_REFS = {MAX_CONTEXT: "number", TIMING_TOKENS: "number"}
TYPE_KINDS = {"int": "number", "tokens": "number", "float": "number", "duration": "duration",
              "ratio": "ratio", "bool": "bool", "string": "string"}
SETTING_KINDS = {"concurrency": "number", "settle": "duration", "timeout": "duration",
                 "fail_fast": "bool", "hit_ratio": "ratio", "max_context": "number",
                 "duration": "duration", "warmup": "duration", "cooldown": "duration"}
SLO_KINDS = {"ttft": "duration", "tpot": "duration", "e2e": "duration", "attainment": "ratio"}
"""The keys of `slo { ... }` and their kinds (docs/metrics.md)."""
LITERAL_KINDS = {"str": "string", "bool": "bool", "null": "null"}
NUMERIC = frozenset({"number", "ratio", "duration"})
DESCRIBE = {"text": "a named text", "number": "a number", "duration": "a duration",
            "ratio": "a ratio", "bool": "true or false", "string": "a string", "object": "an object",
             "null": "null", "list": "a list"}
KIND_HINTS = {("duration", "number"): "write a duration with a unit, like `500ms` or `2s`",
          ("number", "duration"): "write a plain number (a count), not a duration",
          ("number", "ratio"): "write a plain number, not a percentage",
          ("ratio", "duration"): "write a ratio like `95%` or `0.95`"}

def agg_result(func: str, kind: str) -> str:
    """The kind of `func(metric)` for a metric of `kind` (yes/no values count as 1 and 0)."""
    fixed = {"count": "number", "fraction": "ratio", "all": "bool", "any": "bool",
             "rate": "number"}
    if func in fixed:
        return fixed[func]
    if kind == "bool":
        return "ratio" if func == "mean" else "number"
    return kind


def gexpr_kind(g: Any) -> str:
    """The kind of a gate expression of a checked workload (its metrics', its aggregations',
    how they combine; a plan-time value's unit when it is a number written with one), `any`
    where it cannot be told without the params."""
    if isinstance(g, ir.MetricRef):
        return METRICS.get(g.metric, "any")
    if isinstance(g, ir.Agg):
        return agg_result(g.func, METRICS.get(g.arg.metric, "any"))
    if isinstance(g, ir.GBin):
        return arith_kind(g.op, gexpr_kind(g.left), gexpr_kind(g.right)) or "any"
    if isinstance(g, ir.GCall):
        return common_kind([gexpr_kind(a) for a in g.args]) or "any"
    return g.value.unit if isinstance(g.value, ir.Num) else "any"


def gate_kind(gate: Any) -> str | None:
    """The kind of what a gate compares (its left side's, else its right side's): how its
    value and threshold are shown. None when neither can be told."""
    for side in (gate.left, gate.right):
        kind = "any" if side is None else gexpr_kind(side)
        if kind != "any":
            return kind
    return None


def list_of(kind: str) -> str:
    return "list:" + kind


def element(kind: str) -> str | None:
    return kind[5:] if kind.startswith("list:") else None


def describe(kind: str) -> str:
    elem = element(kind)
    return f"a list of {describe(elem)}" if elem else DESCRIBE.get(kind, kind)


def arith_kind(op: str, left: str, right: str) -> str | None:
    """The kind of `left op right`, or None when the units make no sense together.

    `+ -`: same kinds (number with ratio gives ratio). `*`: a number or a ratio scales anything;
    duration * duration is nonsense. `/ // %`: anything by a number or a ratio keeps its kind
    (ratio / ratio is a number), duration / duration is a number, a number by a duration is
    nonsense. `+` also joins two strings or two lists.
    """
    if "any" in (left, right):
        return "any"
    if op == "+" and left == right and (left == "string" or element(left)):
        return left
    if left not in NUMERIC or right not in NUMERIC:
        return None
    if op in ("+", "-"):
        return left if left == right else "ratio" if {left, right} == {"number", "ratio"} else None
    if op == "*":
        return _product(left, right)
    return _quotient(op, left, right)


def _product(left: str, right: str) -> str | None:
    if "number" in (left, right):
        return right if left == "number" else left
    if left == right == "ratio":
        return "ratio"
    return "duration" if {left, right} == {"ratio", "duration"} else None


def _quotient(op: str, left: str, right: str) -> str | None:
    if right == "number":
        return left
    if right == "ratio":
        return "number" if left == "ratio" and op != "%" else left
    if left == right == "duration":
        return "duration" if op == "%" else "number"
    return None


def common_kind(kinds: list[str]) -> str | None:
    """The one kind of all `kinds` (null goes with anything; numbers with ratios are ratios),
    or None when they differ."""
    found = {k for k in kinds if k not in ("null", "any")}
    if found == {"number", "ratio"}:
        return "ratio"
    if len(found) > 1:
        return None
    return found.pop() if found else ("null" if "null" in kinds else "any")


def comparable(op: str, left: str, right: str) -> bool:
    """Whether `left op right` compares like with like (numbers and ratios mix)."""
    if "any" in (left, right) or (op in ("==", "!=") and "null" in (left, right)):
        return True
    if left == right:
        return op in ("==", "!=") or left in NUMERIC or left == "string"
    return {left, right} == {"number", "ratio"}


def is_zero(e: Any) -> bool:
    return isinstance(e, ir.Num) and e.value == 0


def fits(kind: str, wanted: str, e: Any) -> bool:
    if "any" in (kind, wanted) or kind == wanted:
        return True
    if (item := element(kind)) and (wanted_item := element(wanted)):
        return fits(item, wanted_item, None)
    # A plain number is a ratio (0.95 is 95%), and zero is zero in any unit.
    return (wanted == "ratio" and kind == "number") or (wanted in NUMERIC and is_zero(e))


class Scope(dict):
    """Names usable as `$refs` here -> kind; `gates` allows calibration results, `draws` random
    draws (a session's statements)."""

    def __init__(self, kinds: Mapping[str, str], gates: bool = False, draws: bool = False):
        super().__init__(kinds)
        self.gates, self.draws = gates, draws

    def child(self, name: str, kind: str) -> Scope:
        return Scope({**self, name: kind}, self.gates, self.draws)
