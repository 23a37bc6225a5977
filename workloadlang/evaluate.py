"""Plan-time evaluation: expressions to values, command-line strings to param values.

Input: `ir.Expr` trees and an environment `Mapping[str, Value]` (params, loop variables,
`max_context`; a `Drawing` holds the random source too); command-line overrides as strings.
Output: `Value`s (plain JSON-like Python data) and, from `resolve_params`, `(values, diags)`.

Values: numbers are `int` when whole and written without a decimal point (`8k` -> 8000,
`1.5M` -> 1500000, `1.0` -> 1.0), durations are `float` seconds (`500ms` -> 0.5), ratios are
`float` (`95%` -> 0.95); strings, bools, None (`null`), lists and dicts (objects, keys whose
value is null left out).

Exceptions: `EvalError(message, span)` for a type error, a division by zero or an unknown ref;
`ParamValueError` (a `ValueError`) for a bad command-line value.
"""

from __future__ import annotations

import enum
import json
import math
import operator
import re
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Final, Literal, TypeAlias, TypeGuard

from workloadlang import ir
from workloadlang.bounds import MAX_LENGTH, MAX_NUMBER, number_too_large
from workloadlang.diagnostics import Diagnostic, closest, did_you_mean, error
from workloadlang.irexpr import refs_in

Value: TypeAlias = int | float | str | bool | None | list["Value"] | dict[str, "Value"]
"""A plan-time value: a number (`int` or `float`; a `bool` is never one), a string, a bool,
null, a list of values or an object (string keys). See the module docstring for which number a
literal is."""


def is_number(v: object) -> TypeGuard[int | float]:
    """Whether `v` is an int or a float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)

# ---------------------------------------------------------------- number literals

# Suffix -> (multiplier, unit). Shared by the lexer's NUMBER terminal and the command line.
SUFFIXES: dict[str, tuple[float, ir.UnitKind]] = {
    "": (1, "number"), "k": (1e3, "number"), "M": (1e6, "number"),
    "Ki": (1024, "number"), "Mi": (1024 * 1024, "number"),
    "ms": (1e-3, "duration"), "s": (1, "duration"), "min": (60, "duration"),
    "%": (0.01, "ratio"),
}
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|ms|min|k|M|s|%)?")


def split_number(text: str) -> tuple[float, ir.UnitKind] | None:
    """`"1.5M"` -> `(1500000.0, "number")`, `"500ms"` -> `(0.5, "duration")`; None if it is not
    a number."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    scale, unit = SUFFIXES[m.group(2) or ""]
    # Round away the binary noise of e.g. 0.07 * 100 so `7%` is exactly 0.07.
    return round(float(m.group(1)) * scale, 12), unit


def literal_value(num: ir.Num) -> int | float:
    """The Python value of a number literal (see the module docstring for int vs float)."""
    plain_fraction = "." in num.text and num.text[-1].isdigit()
    if num.unit == "number" and float(num.value).is_integer() and not plain_fraction:
        return int(num.value)
    return float(num.value)


# ---------------------------------------------------------------- evaluation

class EvalError(Exception):
    """A plan-time expression could not be evaluated; `span` says where."""

    def __init__(self, message: str, span: ir.Span | None = None):
        super().__init__(message)
        self.message = message
        self.span = span


def evaluate(expr: ir.Expr, env: Mapping[str, Value]) -> Value:
    """The value of `expr` with `$name` looked up in `env`."""
    return _EVAL[expr.kind](expr, env)


def _ref(e: ir.Ref, env: Mapping[str, Value]) -> Value:
    if e.name not in env:
        raise EvalError(f"unknown reference `${e.name}`", e.span)
    return env[e.name]


def _type_name(v: Value) -> str:
    names = {bool: "bool", int: "number", float: "number", str: "string", list: "list",
             dict: "object", type(None): "null"}
    return names.get(type(v), type(v).__name__)


def _binop(e: ir.BinOp, env: Mapping[str, Value]) -> Value:
    if e.op in ("and", "or"):
        return _logic(e, env)
    left, right = evaluate(e.left, env), evaluate(e.right, env)
    if e.op in _COMPARE:
        return _compare(e, left, right)
    return _arith(e, left, right)


def _logic(e: ir.BinOp, env: Mapping[str, Value]) -> bool:
    left = _want_bool(evaluate(e.left, env), e.left.span, e.op)
    if left == (e.op == "or"):  # short-circuit: `true or x`, `false and x`
        return left
    return _want_bool(evaluate(e.right, env), e.right.span, e.op)


def _want_bool(v: Value, span: ir.Span, what: str) -> bool:
    if not isinstance(v, bool):
        raise EvalError(f"`{what}` needs true or false, not {_type_name(v)} {_show(v)}", span)
    return v


_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
_ORDER = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _compare(e: ir.BinOp, left: Value, right: Value) -> bool:
    if e.op in ("==", "!="):
        # true == 1 must not hold: a bool and a number are never equal here.
        same = (is_number(left) and is_number(right)) or type(left) is type(right)
        return (e.op == "!=") != (same and left == right)
    if (is_number(left) and is_number(right)) or (isinstance(left, str)
                                                  and isinstance(right, str)):
        return bool(_ORDER[e.op](left, right))
    raise EvalError(f"cannot compare {_type_name(left)} {_show(left)} with "
                    f"{_type_name(right)} {_show(right)} using `{e.op}`", e.span)


def _arith(e: ir.BinOp, left: Value, right: Value) -> Value:
    if e.op == "+" and isinstance(left, str) and isinstance(right, str):
        _check_length(e, len(left) + len(right), "string", "characters")
        return left + right
    if e.op == "+" and isinstance(left, list) and isinstance(right, list):
        _check_length(e, len(left) + len(right), "list", "items")
        return left + right
    if not is_number(left) or not is_number(right):
        raise EvalError(f"cannot apply `{e.op}` to {_type_name(left)} {_show(left)} and "
                        f"{_type_name(right)} {_show(right)}", e.span)
    if e.op in ("/", "//", "%") and right == 0:
        raise EvalError("division by zero", e.span)
    return _bounded(_ARITH[e.op](left, right), e.span)


def _check_length(e: ir.BinOp, length: int, what: str, unit: str) -> None:
    """EvalError when a `+` would make a string or list longer than `MAX_LENGTH`, before it is
    made: a chain of doublings."""
    if length > MAX_LENGTH:
        raise EvalError(f"the {what} would be {length:,} {unit}, more than {MAX_LENGTH:,}",
                        e.span)


def _bounded(v: float, span: ir.Span) -> float:
    """`v`, unless it is beyond `MAX_NUMBER` (EvalError: no count, size or time is)."""
    if number_too_large(v):
        raise EvalError(f"the value is too large: more than {MAX_NUMBER:,.0f} in magnitude", span)
    return v


_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "//": lambda a, b: a // b, "%": lambda a, b: a % b,
}


def _neg(e: ir.Neg, env: Mapping[str, Value]) -> Value:
    v = evaluate(e.operand, env)
    if not is_number(v):
        raise EvalError(f"cannot negate {_type_name(v)} {_show(v)}", e.span)
    return -v


def _not(e: ir.Not, env: Mapping[str, Value]) -> bool:
    return not _want_bool(evaluate(e.operand, env), e.operand.span, "not")


def _obj(e: ir.ObjExpr, env: Mapping[str, Value]) -> dict[str, Value]:
    values = ((o.key, evaluate(o.value, env)) for o in e.items)
    return {k: v for k, v in values if v is not None}  # a null value leaves the key out


_EVAL: dict[str, Callable[..., Value]] = {
    "num": lambda e, env: literal_value(e),
    "str": lambda e, env: e.value,
    "bool": lambda e, env: e.value,
    "null": lambda e, env: None,
    "ref": _ref,
    "binop": _binop,
    "neg": _neg,
    "not": _not,
    "call": lambda e, env: _call(e, env),
    "listexpr": lambda e, env: [evaluate(i, env) for i in e.items],
    "obj": _obj,
}


# ---------------------------------------------------------------- built-in functions

def _round_half_up(x: float) -> int:
    """round() the way people expect (2.5 -> 3), not Python's banker's rounding."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


_UNARY: dict[str, Callable[[float], Value]] = {
    "ceil": math.ceil, "floor": math.floor, "round": _round_half_up, "abs": abs,
}
DRAWS = {"exponential": (1, 1), "uniform": (2, 2), "lognormal": (2, 2), "gamma": (2, 2)}
"""Random draws (`workloadlang.plan.draws`): name -> (least, most) arguments."""
FUNCTIONS = {"ceil": (1, 1), "floor": (1, 1), "round": (1, 1), "abs": (1, 1),
             "min": (1, None), "max": (1, None), "if": (3, 3), "str": (1, 1), **DRAWS}
"""Built-in functions: name -> (least, most) arguments (None: any number)."""
Drawer = Callable[[str, list[float], ir.Span], float]
"""The planner's random source: `(func, args, span) -> float`, one value drawn for the statement
being planned."""


class Drawing(dict[str, Value]):
    """An environment (a copy of `env`) with the planner's random source (`draw`). In any other
    environment a draw is an `EvalError`."""

    def __init__(self, env: Mapping[str, Value], draw: Drawer):
        super().__init__(env)
        self.draw = draw


def _call(e: ir.Call, env: Mapping[str, Value]) -> Value:
    if e.func not in FUNCTIONS:
        raise EvalError(f"unknown function `{e.func}`", e.span)
    least, most = FUNCTIONS[e.func]
    if len(e.args) < least or (most is not None and len(e.args) > most):
        raise EvalError(f"`{e.func}` takes {_arity(least, most)}, got {len(e.args)}", e.span)
    if e.func == "if":
        return _if(e, env)
    args = [evaluate(a, env) for a in e.args]
    if e.func in DRAWS:
        return _draw(e, args, env)
    if e.func in ("min", "max"):
        return _min_max(e, args)
    if e.func == "str":
        return text_of(args[0])
    return _UNARY[e.func](_want_num(args[0], e))


def text_of(v: Value) -> str:
    """Output: a value as text (`str(x)`, `"{$x}"` in a string): a whole number without a
    fraction (`2`, not `2.0`), others to 12 significant digits, `true`/`false`/`null`, a list
    as its items joined by `, `, a string as it is. A duration is its seconds, a ratio its
    fraction."""
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, bool):
        return "null" if v is None else str(v).lower()
    if isinstance(v, (int, float)):
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:.12g}"
    if isinstance(v, list):
        return ", ".join(text_of(x) for x in v)
    return json.dumps(v, ensure_ascii=False)


def _draw(e: ir.Call, args: list[Value], env: Mapping[str, Value]) -> Value:
    if not isinstance(env, Drawing):
        raise EvalError(f"`{e.func}` draws a random value, which only a session's statements "
                        "can do", e.span)
    return env.draw(e.func, [_want_num(a, e) for a in args], e.span)


def _arity(least: int, most: int | None) -> str:
    if most == least:
        return f"{least} argument{'s' if least > 1 else ''}"
    return f"at least {least} argument"


def _if(e: ir.Call, env: Mapping[str, Value]) -> Value:
    cond = _want_bool(evaluate(e.args[0], env), e.args[0].span, "if")
    return evaluate(e.args[1] if cond else e.args[2], env)  # only the chosen branch


def _min_max(e: ir.Call, args: list[Value]) -> Value:
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    if not items:
        raise EvalError(f"`{e.func}` of an empty list", e.span)
    return (min if e.func == "min" else max)(_want_num(v, e) for v in items)


def _want_num(v: Value, e: ir.Call) -> float:
    if not is_number(v):
        raise EvalError(f"`{e.func}` needs a number, not {_type_name(v)} {_show(v)}", e.span)
    return v


def _show(v: Value) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if v is None or isinstance(v, bool):
        return "null" if v is None else str(v).lower()
    return str(v)


class NotConstant(enum.Enum):
    """The type of `NOT_CONSTANT`."""

    NOT_CONSTANT = "not constant"


NOT_CONSTANT: Final = NotConstant.NOT_CONSTANT
"""What `constant` returns for an expression whose value depends on refs or cannot be computed."""


def constant(expr: ir.Expr | None) -> Value | Literal[NotConstant.NOT_CONSTANT]:
    """The value of an expression without refs (`8k * 2`), else `NOT_CONSTANT`."""
    if expr is None or refs_in(expr):
        return NOT_CONSTANT
    try:
        return evaluate(expr, {})
    except EvalError:
        return NOT_CONSTANT


# ---------------------------------------------------------------- params from the command line

class ParamValueError(ValueError):
    """A command-line (or computed) value that does not fit its param's type."""


def param_flag(name: str) -> str:
    """The command-line flag of a param: `kv_size` -> `--kv-size`."""
    return "--" + name.replace("_", "-")


_EXPECTED = {
    "int": "a whole number like `8` or `8k`", "tokens": "a whole number of tokens like `8k`",
    "float": "a number like `1.75`", "duration": "a duration like `500ms`, `2s` or `1min`",
    "ratio": "a ratio like `95%` or `0.95`", "bool": "true or false", "string": "a string",
}
_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False,
          "1": True, "0": False}


def parse_param_value(param: ir.Param, text: str) -> Value:
    """A command-line string as a value of `param`'s type: `8k`, `1.5M`, `500ms`, `95%`, `true`;
    a list param takes comma-separated items (`50k,100k`). Raises `ParamValueError`."""
    if not param.is_list:
        return _parse_scalar(param.type, text.strip())
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    return [_parse_scalar(param.type, t) for t in items]


def _parse_scalar(ptype: ir.ParamType, text: str) -> Value:
    if ptype == "string":
        return text
    if ptype == "bool":
        if text.lower() not in _BOOLS:
            raise ParamValueError(f"expected {_EXPECTED[ptype]}, got `{text}`")
        return _BOOLS[text.lower()]
    sign = -1 if text.startswith("-") else 1
    parsed = split_number(text.lstrip("-"))
    if parsed is None or not _unit_fits(ptype, parsed):
        raise ParamValueError(f"expected {_EXPECTED[ptype]}, got `{text}`")
    if number_too_large(parsed[0]):
        raise ParamValueError(f"`{text}` is too large: more than {MAX_NUMBER:,.0f} in "
                              "magnitude")
    try:
        return coerce_value(ptype, sign * parsed[0])
    except ParamValueError:
        raise ParamValueError(f"expected {_EXPECTED[ptype]}, got `{text}`") from None


def _unit_fits(ptype: ir.ParamType, parsed: tuple[float, ir.UnitKind]) -> bool:
    value, unit = parsed
    allowed = {"duration": ("duration",), "ratio": ("ratio", "number")}.get(ptype, ("number",))
    return unit in allowed or value == 0  # zero is zero in any unit


def coerce_value(ptype: ir.ParamType, value: Value) -> Value:
    """`value` as a value of a scalar param type (whole numbers for int and tokens, floats for
    float, duration and ratio). Raises `ParamValueError` if it does not fit."""
    if ptype in ("string", "bool"):
        wanted = str if ptype == "string" else bool
        if not isinstance(value, wanted):
            raise ParamValueError(f"expected {_EXPECTED[ptype]}, got {_show(value)}")
        return value
    if not is_number(value):
        raise ParamValueError(f"expected {_EXPECTED[ptype]}, got {_show(value)}")
    if ptype in ("int", "tokens"):
        if not float(value).is_integer():
            raise ParamValueError(f"expected {_EXPECTED[ptype]}, got {value:.12g}")
        return int(value)
    return float(value)


def format_value(ptype: ir.ParamType, value: Value) -> str:
    """A value as a person would write it in a `.wl` file (`500ms`, `95%`, `"x"`, `50000`)."""
    if isinstance(value, list):
        return ", ".join(format_value(ptype, v) for v in value)
    if ptype == "duration" and is_number(value):
        return f"{value * 1000:.12g}ms" if 0 < abs(value) < 1 else f"{value:.12g}s"
    if ptype == "ratio" and is_number(value):
        return f"{value * 100:.12g}%"
    return f"{value:.12g}" if isinstance(value, float) else _show(value)


# ---------------------------------------------------------------- resolving all params

MAX_CONTEXT = "max_context"
"""The built-in environment ref `$max_context`: the engine's context limit, None if unknown."""
TIMING_TOKENS = "timing_tokens"
"""The built-in environment ref `$timing_tokens`: the least prompt (tokens) whose re-read timing
tells a cache hit from a recompute on this engine, from `wl run`'s calibration; 0 before one
(`wl plan`)."""
COPY = "copy"
"""The built-in ref `$copy` inside a session: the index of its copy (`NAME#k` is copy k)."""


def resolve_params(wl: ir.Workload, overrides: Mapping[str, str],
                   env: Mapping[str, Value]) -> tuple[dict[str, Value], list[Diagnostic]]:
    """Every param's value: command-line `overrides` (by name, `kv_size` or `kv-size`), else its
    default, derived defaults evaluated in dependency order with `env` (e.g. `max_context`).

    Returns the values of the params that resolved (evaluate other expressions with
    `{**env, **values}`) and diagnostics WL401-WL404 and WL407; no exception for bad input.
    """
    params = {p.name: p for p in wl.params}
    diags: list[Diagnostic] = []
    values, failed = _parse_overrides(params, overrides, diags)
    given = set(values) | failed
    below = dict(env)  # under each param's `ChainMap(values, below)`
    for p in param_order(wl.params)[0]:
        if p.name not in given and not _resolve_default(p, params, values, below, diags, failed):
            failed.add(p.name)
    for p in wl.params:
        if p.name in values:
            diags += _check_bounds(p, values, below, derived=p.name not in given)
    return {p.name: values[p.name] for p in wl.params if p.name in values}, diags


def _parse_overrides(params: Mapping[str, ir.Param], overrides: Mapping[str, str],
                     diags: list[Diagnostic]) -> tuple[dict[str, Value], set[str]]:
    """The overrides as typed values, and the names of the params whose override was bad."""
    values: dict[str, Value] = {}
    bad: set[str] = set()
    for raw, text in overrides.items():
        name = raw.lstrip("-").replace("-", "_")
        if name not in params:
            diags.append(_unknown_override(raw, name, params))
            continue
        try:
            values[name] = parse_param_value(params[name], text)
        except ParamValueError as exc:
            diags.append(error("WL404", f"bad value for {param_flag(name)}: {exc}", None))
            bad.add(name)
    return values, bad


def _unknown_override(raw: str, name: str, params: Mapping[str, ir.Param]) -> Diagnostic:
    close = closest(name, params)
    if close:
        hint = f"did you mean `{close}` ({param_flag(close)})?"
    elif params:
        hint = "the parameters are " + ", ".join(param_flag(n) for n in params)
    else:
        hint = "this workload has no parameters"
    return error("WL403", f"unknown parameter `{raw}`", None, hint)


def param_order(params: tuple[ir.Param, ...]) -> tuple[list[ir.Param], list[list[str]]]:
    """The params in dependency order (the params a default refers to come first), and each
    cycle among defaults once, as the names around it: `["a", "b", "a"]`. Iterative: a chain of
    thousands of derived params is no deeper than Python's stack."""
    by_name = {p.name: p for p in params}
    deps = {p.name: sorted(refs_in(p.default) & by_name.keys() if p.default else ())
            for p in params}
    order: list[ir.Param] = []
    cycles: list[list[str]] = []
    done: set[str] = set()
    for p in params:
        if p.name in done:
            continue
        path, on_path, pending = [p.name], {p.name}, [iter(deps[p.name])]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:  # every dependency of path[-1] is placed: place it
                pending.pop()
                name = path.pop()
                on_path.discard(name)
                done.add(name)
                order.append(by_name[name])
            elif dep in on_path:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in done:
                path.append(dep)
                on_path.add(dep)
                pending.append(iter(deps[dep]))
    return order, cycles


def _resolve_default(p: ir.Param, params: Mapping[str, ir.Param], values: dict[str, Value],
                     env: dict[str, Value], diags: list[Diagnostic], failed: set[str]) -> bool:
    """Evaluate `p`'s default into `values`; False (with a diagnostic unless a dependency already
    has one) when it cannot be."""
    if p.default is None:
        diags.append(error("WL402", f"missing required parameter `{p.name}`", p.span,
                           f"pass {param_flag(p.name)} {_example(p)}"))
        return False
    deps = refs_in(p.default) & params.keys()
    if deps & failed:
        return False
    if deps - values.keys():
        diags.append(error("WL404", f"cannot compute `{p.name}`: it depends on itself",
                           p.default.span, f"set {param_flag(p.name)} explicitly"))
        return False
    try:
        values[p.name] = _typed(p, evaluate(p.default, ChainMap(values, env)))
    except (EvalError, ParamValueError) as exc:
        diags.append(_default_failed(p, p.default, env, exc))
        return False
    return True


def _typed(p: ir.Param, value: Value) -> Value:
    if p.is_list:
        if not isinstance(value, list):
            raise ParamValueError(f"expected a list, got {_show(value)}")
        return [coerce_value(p.type, v) for v in value]
    return coerce_value(p.type, value)


def _default_failed(p: ir.Param, default: ir.Expr, env: Mapping[str, Value],
                    exc: Exception) -> Diagnostic:
    if MAX_CONTEXT in refs_in(default) and env.get(MAX_CONTEXT) is None:
        return error("WL407", f"`{p.name}` needs the engine's context limit (`$max_context`), "
                     "which is unknown", default.span,
                     f"pass --max-context N, or set {param_flag(p.name)}")
    span = exc.span if isinstance(exc, EvalError) and exc.span else default.span
    message = exc.message if isinstance(exc, EvalError) else str(exc)
    return error("WL404", f"cannot compute `{p.name}`: {message}", span,
                 f"set {param_flag(p.name)} explicitly")


def _example(p: ir.Param) -> str:
    return {"duration": "2s", "ratio": "50%", "bool": "true", "string": "TEXT"}.get(p.type, "N")


NON_NEGATIVE = ("tokens", "duration")
"""Param types whose values are never negative (an implicit `in 0..`)."""


def _check_bounds(p: ir.Param, values: dict[str, Value], env: dict[str, Value],
                  derived: bool) -> list[Diagnostic]:
    """WL401 when `p`'s value (each item of a list) is not `one of` its choices or is outside its
    inclusive range `in lo..hi` (a tokens or duration value also below 0)."""
    value, full = values[p.name], ChainMap(values, env)
    low, high = _bound(p, "low", full), _bound(p, "high", full)
    if p.type in NON_NEGATIVE and (low is None or low < 0):
        low = 0
    for item in value if isinstance(value, list) else [value]:
        shown = f"`{p.name}` = {format_value(p.type, item)}"
        if p.choices and item not in p.choices:
            choices = ", ".join(_show(c) for c in p.choices)
            return [error("WL401", f"{shown} is not one of {choices}", p.span,
                          did_you_mean(str(item), p.choices, '"{}"'))]
        if is_number(item) and not ((low is None or item >= low) and (high is None or item <= high)):
            bounds = "..".join("" if b is None else format_value(p.type, b) for b in (low, high))
            if item < 0 and p.type in NON_NEGATIVE:
                return [error("WL401", f"{shown} is negative; a `{p.type}` value never is",
                              p.span, _range_hint(p, 0, None, derived))]
            span = p.range.span if p.range else p.span  # a range, or a tokens or duration type
            return [error("WL401", f"{shown} is out of its range {bounds}", span,
                          _range_hint(p, low, high, derived))]
    return []


def _bound(p: ir.Param, which: str, env: Mapping[str, Value]) -> int | float | None:
    """A range bound's value, None when absent or not computable (its own diagnostic elsewhere)."""
    expr = getattr(p.range, which) if p.range else None
    try:
        value = evaluate(expr, env) if expr is not None else None
    except EvalError:
        return None
    return value if is_number(value) else None


def _range_hint(p: ir.Param, low: float | None, high: float | None, derived: bool) -> str:
    flag = param_flag(p.name)
    if derived and p.default is not None and refs_in(p.default):
        return f"it is computed from its default; set {flag} or change what it is computed from"
    lo, hi = (format_value(p.type, b) if b is not None else None for b in (low, high))
    if lo is not None and hi is not None:
        return f"set {flag} between {lo} and {hi}"
    return f"set {flag} to at least {lo}" if lo is not None else f"set {flag} to at most {hi}"
