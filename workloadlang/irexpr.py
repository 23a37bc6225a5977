"""The IR's base, values and expressions (re-exported by `workloadlang.ir`).

Input: made by `workloadlang.parse`. Output: `Node` (frozen, no unknown fields), `Span`, the
expression nodes (`Expr`: numbers with their unit, strings, booleans, `null`, `$refs`,
operators, calls, lists and objects) and `Option` (`key = value` of an `options { }` block or an
object value). `workloadlang.ir` builds the statements, sessions, gates and workload on them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Node(BaseModel):
    """Base of every IR node: frozen, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Span(Node):
    """A source range: 1-based line and column of the first character, and of one past the last."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int


# ---------------------------------------------------------------- values and expressions

UnitKind = Literal["number", "duration", "ratio"]
"""The dimension of a literal: plain or k/M-suffixed counts are numbers, `500ms` a duration
(seconds), `95%` a ratio (0.95)."""


class Num(Node):
    kind: Literal["num"] = "num"
    value: float
    unit: UnitKind = "number"
    text: str  # as written, e.g. "8k", "1.5M", "500ms", "95%"
    span: Span


class Str(Node):
    kind: Literal["str"] = "str"
    value: str
    span: Span


class Bool(Node):
    kind: Literal["bool"] = "bool"
    value: bool
    span: Span


class Ref(Node):
    """`$name`: a param, a derived param, a loop variable or a calibration result."""

    kind: Literal["ref"] = "ref"
    name: str
    span: Span


class BinOp(Node):
    kind: Literal["binop"] = "binop"
    op: Literal["+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or"]
    left: Expr
    right: Expr
    span: Span


class Neg(Node):
    kind: Literal["neg"] = "neg"
    operand: Expr
    span: Span


class Not(Node):
    kind: Literal["not"] = "not"
    operand: Expr
    span: Span


class Call(Node):
    """A built-in function: ceil, floor, round, min, max, abs, `str(x)` (a value as text;
    `"{$x}"` in a string is `str($x)`), and `if(cond, a, b)`."""

    kind: Literal["call"] = "call"
    func: str
    args: tuple[Expr, ...]
    span: Span


class Null(Node):
    """`null`: no value; an option whose value is null is left out of the request."""

    kind: Literal["null"] = "null"
    span: Span


class ListExpr(Node):
    """`[a, b, c]`: a list value (for list params and `for x in [...]`)."""

    kind: Literal["listexpr"] = "listexpr"
    items: tuple[Expr, ...]
    span: Span


class ObjExpr(Node):
    """`{ key = value, ... }`: a JSON object value (request options)."""

    kind: Literal["obj"] = "obj"
    items: tuple[Option, ...]
    span: Span


Expr = Annotated[
    Num | Str | Bool | Null | Ref | BinOp | Neg | Not | Call | ListExpr | ObjExpr,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------- request options

class Option(Node):
    """`key = value` in an `options { }` block (or an object value); the value is any expression,
    including objects and lists; a null value leaves the key out of the request."""

    key: str
    value: Expr
    span: Span


# ---------------------------------------------------------------- walking an expression

def refs_in(expr: Expr) -> set[str]:
    """The names of every `$ref` inside `expr`."""
    if isinstance(expr, Ref):
        return {expr.name}
    return set().union(*(refs_in(c) for c in sub_exprs(expr)))


def sub_exprs(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `expr`."""
    if isinstance(expr, BinOp):
        return (expr.left, expr.right)
    if isinstance(expr, (Neg, Not)):
        return (expr.operand,)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, ListExpr):
        return expr.items
    if isinstance(expr, ObjExpr):
        return tuple(o.value for o in expr.items)
    return ()


for _m in list(globals().values()):
    if isinstance(_m, type) and issubclass(_m, Node) and _m is not Node:
        _m.model_rebuild()
