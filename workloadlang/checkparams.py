"""The checks of a workload's params, a part of the checker (`workloadlang.check`).

Input: each `ir.Param` (its type, default, range, choices, `sweep [...]`) of the checker's
workload (`ParamChecks`, given the `checkexpr.Checker`). Output: the checker's diagnostics: a default of the wrong kind or sign, a non-integer for an
integer type, a range or choices a default falls outside of, a sweep that is not a list of
written values in range, a param named like an option of `wl plan` / `wl run` (WL233, WL234,
WL304, WL305, ...).
"""

from __future__ import annotations

from typing import Any

from workloadlang import ir
from workloadlang.bounds import MAX_SWEEP_POINTS
from workloadlang.checkexpr import Checker, const_items, constant_text
from workloadlang.diagnostics import did_you_mean
from workloadlang.evaluate import COPY, NON_NEGATIVE, constant, is_number, param_order
from workloadlang.kinds import BUILTIN_REFS, CALIBRATION_REFS, NUMERIC, TYPE_KINDS, list_of


class ParamChecks:
    """The param checks (see the module), adding to the diagnostics of `checker`."""

    def __init__(self, checker: Checker) -> None:
        self.c = checker

    def check_params(self) -> None:
        self.c.unique(self.c.wl.params, "parameter")
        for p in self.c.wl.params:
            if p.name in BUILTIN_REFS or p.name in CALIBRATION_REFS or p.name == COPY:
                self.c.err("WL212", f"`{p.name}` is a built-in name and cannot be a parameter",
                         p.span, f"rename it, e.g. `my_{p.name}`")
            self.check_flag(p)
            self.check_default(p)
            self.check_range(p)
            self.check_choices(p)
            self.check_sweep(p)
        swept = [(p, p.sweep) for p in self.c.wl.params if p.sweep is not None]
        for p, sweep in swept[1:]:
            self.c.err("WL233", f"`{p.name}` is swept, and so is `{swept[0][0].name}`: a workload "
                     "sweeps one param", sweep.span, "sweep the other from the command line "
                     "in a second run (`--sweep NAME=A,B`)")
        for cycle in param_order(self.c.wl.params)[1]:
            first = self.c.params[cycle[0]]
            path = " -> ".join(f"`${n}`" for n in cycle)
            span = first.default.span if first.default else first.span  # a cycle's have one
            self.c.err("WL210", f"`{first.name}` is computed from itself: {path}", span,
                     "give one of them a plain value")

    def check_flag(self, p: ir.Param) -> None:
        """WL234 when the param's flag (`--NAME`, `-` for `_`) is an option of `wl plan` or
        `wl run` (`self.c.flags`): the option would take the value, and the param keep its
        default."""
        flag = p.name.replace("_", "-")
        if flag in self.c.flags:
            self.c.err("WL234", f"parameter `{p.name}` has the flag `--{flag}`, which is an option "
                     "of `wl plan` / `wl run`: the option would take the value", p.span,
                     f"rename it, e.g. `{p.name}_n` or `my_{p.name}`")

    def check_default(self, p: ir.Param) -> None:
        if p.default is None:
            return
        wanted = TYPE_KINDS[p.type]
        what = f"the default of `{p.name}`"
        if p.is_list and isinstance(p.default, ir.ListExpr):
            fits = all([self.c.expect(item, self.c.top, wanted, f"each item of {what}")
                        for item in p.default.items])
        else:
            fits = self.c.expect(p.default, self.c.top, list_of(wanted) if p.is_list else wanted, what)
        if fits:
            self.check_whole(p, p.default)
            self.check_sign(p, p.default)

    def check_sweep(self, p: ir.Param) -> None:
        """`sweep [...]`: a list of constants of the param's type, each within its range and
        choices; not for a list param."""
        if p.sweep is None:
            return
        if p.is_list or not isinstance(p.sweep, ir.ListExpr) or not p.sweep.items or not all(
                sweep_text(item) is not None for item in p.sweep.items):
            self.c.err("WL233", f"the sweep of `{p.name}` must be a list of values written out, "
                     "like `sweep [1, 2, 4]`" + (" (a list param is not swept)" if p.is_list
                                                 else ""), p.sweep.span)
            return
        if len(p.sweep.items) > MAX_SWEEP_POINTS:
            self.c.err("WL233", f"the sweep of `{p.name}` has {len(p.sweep.items):,} points, more "
                     f"than {MAX_SWEEP_POINTS}", p.sweep.span,
                     "each point is a run: sweep fewer values, or split the sweep in runs")
            return
        wanted = TYPE_KINDS[p.type]
        for item in p.sweep.items:
            if self.c.expect(item, self.c.top, wanted, f"each value of the sweep of `{p.name}`"):
                self.check_whole(p, item)
                self.check_sign(p, item)
        low = constant(p.range.low) if p.range else None
        high = constant(p.range.high) if p.range else None
        for item in p.sweep.items:
            v = constant(item)
            if is_number(v) and ((is_number(low) and v < low) or (is_number(high) and v > high)):
                self.c.err("WL305", f"the sweep value {constant_text(item, v)} of `{p.name}` is "
                         "outside its range", item.span)
            if p.choices and isinstance(v, str) and v not in p.choices:
                self.c.err("WL304", f'the sweep value "{v}" of `{p.name}` is not one of its '
                         "choices", item.span, did_you_mean(v, p.choices, '"{}"'))

    def check_sign(self, p: ir.Param, e: Any) -> None:
        """WL305 when a tokens or duration param gets a negative constant default."""
        bad = [v for v in const_items(e) if is_number(v) and v < 0]
        if p.type in NON_NEGATIVE and bad:
            self.c.err("WL305", f"`{p.name}` is declared `{p.type}`, which is never negative, but "
                     f"its default is {bad[0]:g}", e.span)

    def check_whole(self, p: ir.Param, e: Any) -> None:
        """WL303 when an int or tokens param gets a constant that is not a whole number."""
        bad = [v for v in const_items(e) if isinstance(v, float) and not v.is_integer()]
        if p.type in ("int", "tokens") and bad:
            self.c.err("WL303", f"`{p.name}` is declared `{p.type}`, but {bad[0]:g} is not a "
                     "whole number", e.span, "write a whole number, like `8k` or `1500`")

    def check_range(self, p: ir.Param) -> None:
        if p.range is None:
            return
        wanted = TYPE_KINDS[p.type]
        if wanted not in NUMERIC:
            self.c.err("WL302", f"`{p.name}` is {p.type}, which has no range", p.range.span,
                     "use `one of` for a set of strings" if p.type == "string" else None)
            return
        for bound in (p.range.low, p.range.high):
            if bound is not None:
                self.c.expect(bound, self.c.top, wanted, f"the range of `{p.name}`")
        self.check_constant_range(p, p.range)

    def check_constant_range(self, p: ir.Param, range_: ir.Range) -> None:
        low, high = constant(range_.low), constant(range_.high)
        if is_number(low) and is_number(high) and low > high:
            self.c.err("WL305", f"the range of `{p.name}` is empty: {low:g} > {high:g}",
                     range_.span)
        if p.default is None:
            return
        for v in const_items(p.default):
            if is_number(v) and ((is_number(low) and v < low) or (is_number(high) and v > high)):
                self.c.err("WL305", f"the default of `{p.name}` ({v:g}) is outside its range",
                         p.default.span, "change the default or the range")
                return

    def check_choices(self, p: ir.Param) -> None:
        if not p.choices:
            return
        if p.type != "string":
            self.c.err("WL304", f"`one of` is for string params, but `{p.name}` is {p.type}", p.span)
            return
        if p.default is None:
            return
        for v in const_items(p.default):
            if isinstance(v, str) and v not in p.choices:
                self.c.err("WL304", f'the default of `{p.name}` ("{v}") is not one of its choices',
                         p.default.span, did_you_mean(v, p.choices, '"{}"'))


def sweep_text(e: Any) -> str | None:
    """A sweep value as a command-line value (`8k`, `500ms`, `-2`, `true`, a string), or None
    when it is not written out."""
    if isinstance(e, ir.Num):
        return e.text
    if isinstance(e, ir.Neg) and isinstance(e.operand, ir.Num):
        return "-" + e.operand.text
    if isinstance(e, ir.Bool):
        return "true" if e.value else "false"
    if isinstance(e, ir.Str):
        return e.value
    return None
