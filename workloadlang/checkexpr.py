"""The checker's core, given to each of its parts: the workload, the diagnostics found so far,
the names used, and the kinds of plan-time expressions.

Input: an `ir.Workload` (and the flags of the command that runs it). Output: a `Checker` whose
`diags` the parts of the checker (`check.py` the statements and gates, `checkparams.py`,
`checksessions.py`, `checkflow.py`, `checkparts.py`) add to: `err`, `unique` (WL202), `kind`
(the kind of an expression, reporting unknown names, functions and unit errors on the way:
WL201, WL205, WL208, WL209, WL217, WL301, WL302, WL306), `expect` (WL301, WL302) and `value` (a
constant's bounds: WL303, WL305).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from workloadlang import bounds, ir
from workloadlang.declared import Declared
from workloadlang.diagnostics import Diagnostic, closest, did_you_mean, error
from workloadlang.evaluate import (
    COPY,
    DRAWS,
    FUNCTIONS,
    NotConstant,
    Value,
    constant,
    is_number,
)
from workloadlang.kinds import (
    BUILTIN_REFS,
    CALIBRATION_KINDS,
    CALIBRATION_REFS,
    KIND_HINTS,
    LITERAL_KINDS,
    NUMERIC,
    TYPE_KINDS,
    Scope,
    arith_kind,
    common_kind,
    comparable,
    describe,
    element,
    fits,
    is_zero,
    list_of,
)

BOUND_HINTS = {
    "max_tokens": "`max_tokens` 0 asks for no answer, which engines refuse or ignore; `probe` "
                  "sends a prompt for one token",
    "concurrency": "concurrency is how many requests may be in flight at once",
    "timeout": "the timeout is how long a request may take; leave it out for the default",
    "hit_ratio": "a request is a hit when it was served at least this share of what a perfect "
                 "cache would serve",
}
"""Why a setting's constant is out of bounds, by `bounds.PLACES` entry."""


class Checker:
    """What every part of the checker reads and adds to (see the module)."""

    def __init__(self, wl: ir.Workload, flags: frozenset[str] = frozenset()):
        self.wl, self.flags = wl, flags
        self.diags: list[Diagnostic] = []
        self.used: set[str] = set()
        self.params = {p.name: p for p in wl.params}
        self.top = Scope({**BUILTIN_REFS, **{p.name: _param_kind(p) for p in wl.params}})
        self.names = Declared(wl, self.diags)
        self.texts = self.top  # and the named texts (`check_texts`)

    def err(self, code: str, message: str, span: ir.Span | None, hint: str | None = None) -> None:
        self.diags.append(error(code, message, span, hint))

    def unique(self, items: Iterable[Any], what: str, key: str = "name") -> None:
        """WL202 for each item whose `key` repeats an earlier one's."""
        seen: dict[str, ir.Span] = {}
        for item in items:
            name = getattr(item, key)
            if name in seen:
                self.err("WL202", f"duplicate {what} `{name}`", item.span,
                         f"the first is on line {seen[name].line}")
            seen.setdefault(name, item.span)

    # -- expressions

    def kind(self, e: Any, scope: Scope) -> str:
        """The kind of expression `e`, reporting unknown names and unit errors on the way."""
        if isinstance(e, ir.Num):
            return e.unit
        return LITERAL_KINDS.get(e.kind) or getattr(self, "_k_" + e.kind)(e, scope)

    def expect(self, e: Any, scope: Scope, wanted: str, what: str) -> bool:
        """Whether `e` has the kind `wanted` (WL301 or WL302 when not)."""
        kind = self.kind(e, scope)
        if fits(kind, wanted, e):
            return True
        code = "WL301" if {kind, wanted} <= NUMERIC else "WL302"
        self.err(code, f"{what} must be {describe(wanted)}, but {shown(e)} is "
                 f"{describe(kind)}", e.span, KIND_HINTS.get((wanted, kind)))
        return False

    def value(self, e: Any, scope: Scope, wanted: str, what: str, place: str | None) -> None:
        """A value of kind `wanted` at `place` (a `bounds.PLACES` entry): its kind, and, when
        it is a constant, its bounds (WL305) and whether it is whole (WL303)."""
        if e is None or not self.expect(e, scope, wanted, what) or place is None:
            return
        v = constant(e)
        if not is_number(v):
            return
        problem = bounds.out_of_bounds(place, v)
        if problem:
            code = "WL303" if problem == "must be a whole number" else "WL305"
            hint = ("write a whole number, or round it with `ceil(...)`" if code == "WL303"
                    else BOUND_HINTS.get(place) if place != "max_tokens" or v == 0 else None)
            self.err(code, f"{what} {problem}, not {constant_text(e, v)}", e.span, hint)

    def _k_ref(self, e: ir.Ref, scope: Scope) -> str:
        if e.name in scope:
            self.used.add(e.name)
            return scope[e.name]
        if e.name in CALIBRATION_REFS:
            return self.calibration_ref(e, scope)
        if any(t.name == e.name for t in self.wl.texts):
            self.err("WL201", f"`${e.name}` is a named text, which is not usable here", e.span,
                     "a named text is a message part (`user $NAME`), after its declaration")
            return "any"
        if e.name == COPY:
            self.err("WL201", "`$copy` is the index of a session's copy, known only inside a "
                     "session", e.span)
            return "any"
        candidates = [*scope, *(CALIBRATION_REFS if scope.gates else ())]
        close = closest(e.name, candidates)
        if close:
            self.used.add(close)  # so the misspelt param is not also reported as unused
        self.err("WL201", f"unknown parameter `${e.name}`", e.span,
                 close and f"did you mean `${close}`?")
        return "any"

    def calibration_ref(self, e: ir.Ref, scope: Scope) -> str:
        step = CALIBRATION_REFS[e.name]
        if not scope.gates:
            self.err("WL209", f"`${e.name}` is measured at run time, so it can only be used in "
                     "gates and report", e.span)
        elif step not in {c.what for c in self.wl.calibrations}:
            self.err("WL208", f"`${e.name}` needs a `calibrate {step}` step", e.span,
                     f"add `calibrate {step}` to the workload")
        return CALIBRATION_KINDS[e.name]

    def _k_binop(self, e: ir.BinOp, scope: Scope) -> str:
        if e.op in ("and", "or"):
            for side in (e.left, e.right):
                self.expect(side, scope, "bool", f"each side of `{e.op}`")
            return "bool"
        left, right = self.kind(e.left, scope), self.kind(e.right, scope)
        return self.combine(e.op, (e.left, e.right), (left, right), e.span)

    def combine(self, op: str, nodes: tuple, kinds: tuple[str, str], span: ir.Span) -> str:
        """The kind of `left op right` (expressions or gate operands `nodes` of `kinds`)."""
        left, right = kinds
        if op in ("==", "!=", "<", "<=", ">", ">="):
            zero = any(is_zero(_plain(n)) for n in nodes)
            if not (comparable(op, left, right) or (zero and set(kinds) <= NUMERIC)):
                self.err("WL301", f"cannot compare {describe(left)} with {describe(right)}",
                         span, "compare like with like")
            return "bool"
        result = arith_kind(op, left, right)
        if result is None:
            self.err("WL301", f"cannot use `{op}` on {describe(left)} and {describe(right)}",
                     span, "see the unit rules in docs/language.md")
        return result or "any"

    def _k_neg(self, e: ir.Neg, scope: Scope) -> str:
        kind = self.kind(e.operand, scope)
        if kind not in NUMERIC | {"any"}:
            self.err("WL302", f"cannot negate {describe(kind)}", e.span)
            return "any"
        return kind

    def _k_not(self, e: ir.Not, scope: Scope) -> str:
        self.expect(e.operand, scope, "bool", "the operand of `not`")
        return "bool"

    def _k_call(self, e: ir.Call, scope: Scope) -> str:
        kinds = [self.kind(a, scope) for a in e.args]
        if e.func not in FUNCTIONS:
            self.err("WL205", f"unknown function `{e.func}`", e.span,
                     did_you_mean(e.func, FUNCTIONS))
            return "any"
        least, most = FUNCTIONS[e.func]
        if len(kinds) < least or (most is not None and len(kinds) > most):
            count = f"{least}" if least == most else f"at least {least}"
            self.err("WL306", f"`{e.func}` takes {count} argument{'s' * (least != 1)}, "
                     f"not {len(kinds)}", e.span)
            return "any"
        if e.func in DRAWS:
            return self._k_draw(e, kinds, scope)
        if e.func == "str":
            return "string"  # any value has a text
        return self._k_if(e, kinds) if e.func == "if" else self._k_numeric_call(e, kinds)

    def _k_draw(self, e: ir.Call, kinds: list[str], scope: Scope) -> str:
        """A random draw: in a session's statements only (WL217); `uniform(low, high)` of one
        kind, the others of their mean's kind with a plain coefficient of variation."""
        if not scope.draws:
            self.err("WL217", f"`{e.func}` draws a random value, which only a session's "
                     "statements can do", e.span, "a param, setting or named text has one "
                     "value for the whole run")
        if e.func in ("lognormal", "gamma"):
            if kinds[1] not in ("number", "ratio", "any"):
                self.err("WL302", f"the coefficient of variation of `{e.func}` must be a "
                         f"number, not {describe(kinds[1])}", e.args[1].span)
            kinds = kinds[:1]
        return self._k_numeric_call(e, kinds)

    def _k_if(self, e: ir.Call, kinds: list[str]) -> str:
        if not fits(kinds[0], "bool", None):
            self.err("WL302", f"the condition of `if` must be true or false, not "
                     f"{describe(kinds[0])}", e.args[0].span)
        return self.unify(kinds[1:], e.span, "the two branches of `if`")

    def _k_numeric_call(self, e: ir.Call, kinds: list[str]) -> str:
        if e.func in ("min", "max") and len(kinds) == 1 and (item := element(kinds[0])):
            kinds = [item]
        for arg, kind in zip(e.args, kinds):
            if kind not in NUMERIC | {"any"}:
                self.err("WL302", f"`{e.func}` needs numbers, not {describe(kind)}", arg.span)
                return "any"
        return self.unify(kinds, e.span, f"the arguments of `{e.func}`")

    def unify(self, kinds: list[str], span: ir.Span, what: str) -> str:
        """The common kind of `kinds`; WL301 when they have none."""
        common = common_kind(kinds)
        if common is None:
            shown = " and ".join(sorted({describe(k) for k in kinds if k not in ("null", "any")}))
            self.err("WL301", f"{what} mix {shown}", span, "make them the same kind")
        return common or "any"

    def _k_listexpr(self, e: ir.ListExpr, scope: Scope) -> str:
        # A list may mix kinds (an option value is any JSON); a list param's items are checked
        # one by one against its type instead.
        return list_of(common_kind([self.kind(i, scope) for i in e.items]) or "any")

    def _k_obj(self, e: ir.ObjExpr, scope: Scope) -> str:
        self.check_options(e.items, scope)
        return "object"

    def check_options(self, options: tuple[ir.Option, ...], scope: Scope | None = None) -> None:
        self.unique(options, "option", key="key")
        for option in options:
            if self.kind(option.value, scope or self.top) == "text":
                self.err("WL302", "a named text is message content, not an option value",
                         option.value.span, "use it as a part of a message: `user $NAME`")


def shown(e: Any) -> str:
    """How to name an expression in a message: its text if it is short."""
    if isinstance(e, ir.Num):
        return f"`{e.text}`"
    if isinstance(e, ir.Ref):
        return f"`${e.name}`"
    return "this"


def constant_text(e: Any, v: float) -> str:
    """A constant as the file wrote it (`-3`, `0.5`, `200%`), or its value when computed."""
    if isinstance(e, ir.Neg) and isinstance(e.operand, ir.Num):
        return f"`-{e.operand.text}`"
    return f"`{e.text}`" if isinstance(e, ir.Num) else f"{v:g}"


def const_items(e: Any) -> Sequence[Value | NotConstant]:
    """The items of a constant list expression, or the constant as a one-item list."""
    value = constant(e)
    return value if isinstance(value, list) else [value]


def _plain(g: Any) -> Any:
    return g.value if isinstance(g, ir.GNum) else g


def _param_kind(p: ir.Param) -> str:
    return list_of(TYPE_KINDS[p.type]) if p.is_list else TYPE_KINDS[p.type]
