"""What a `.wl` source may hold: the bounds that keep reading, checking and planning it small.

Input: a file's bytes (`decode`), a source text (`check_text`), the parser's tokens
(`too_many_tokens`) and its tree (`too_deep`). Output: the text to parse, or a `Diagnostic` with a
location (docs/diagnostics.md: WL108 nesting, WL109 not UTF-8, WL110 too large, WL111 a number
too large); the largest number and the longest string or list a computation makes.

Every limit is far above any real workload and low enough that `wl check` and `wl plan` stay
within a few hundred MB whatever the file holds: the parser's tree and the typed IR cost a few
KB per token, Python's regular expressions about a hundred bytes per escape in one string, and
the recursive stages (lowering, checks, evaluation, serialisation) a few stack frames per level.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from workloadlang import ir
from workloadlang.diagnostics import Diagnostic, error

MAX_FILE_BYTES = 10 * 1024 * 1024
"""A `.wl` file larger than this is refused before it is decoded."""
MAX_LINE_CHARS = 1_000_000
"""A longer line is refused before it is lexed (a string literal lives on one line)."""
MAX_TOKENS = 50_000
"""More tokens than this is refused while parsing (the bundled workloads have under 1,000)."""
MAX_DEPTH = 200
"""Levels of the syntax tree: a block in a block, an `else if`, an operand of an operator, a
bracket or an object inside another each add one or two."""
MAX_NUMBER = 1e15
"""The largest magnitude of a number, written or computed (exact as a float up to 9e15)."""
MAX_LENGTH = MAX_FILE_BYTES
MAX_SWEEP_POINTS = 100
"""The most points (runs) a sweep may have (its points together are also within the planner's
limits: `plan.sweeppoints`)."""
"""The longest string (characters) or list (items) a computation may make (`+` of two)."""

_LONG_LINE = re.compile(r"(?m)^[^\n]{%d}" % (MAX_LINE_CHARS + 1))  # from line starts only: linear


def decode(data: bytes, filename: str) -> str | Diagnostic:
    """A file's bytes as text (UTF-8; a leading byte-order mark is dropped), or the diagnostic
    saying why they are not a `.wl` source (too large, not UTF-8)."""
    if len(data) > MAX_FILE_BYTES:
        return error("WL110", f"the file is {len(data):,} bytes or more, over the limit of "
                     f"{MAX_FILE_BYTES:,}", _point(filename, 1, 1),
                     "a workload file is a few KB; generate repeated parts with `repeat`")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return error("WL109", "the file is UTF-16 text, not UTF-8", _point(filename, 1, 1),
                     "save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _not_utf8(data, exc.start, filename, "is not valid UTF-8")
    nul = data.find(b"\0")
    return text if nul < 0 else _not_utf8(data, nul, filename, "is NUL (binary, or UTF-16)")


def _not_utf8(data: bytes, at: int, filename: str, why: str) -> Diagnostic:
    """WL109 at byte `at`: its line, and its column in characters."""
    line_start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, at) + 1
    col = len(data[line_start:at].decode("utf-8-sig" if line == 1 else "utf-8",
                                         errors="replace")) + 1
    return error("WL109", f"the file is not UTF-8 text: byte 0x{data[at]:02x} at offset {at:,} "
                 f"{why}", _point(filename, line, col),
                 "save the file as UTF-8 (a Latin-1 or UTF-16 file must be converted)")


def check_text(text: str, filename: str) -> Diagnostic | None:
    """WL110 when the text is too large to parse (characters, or one line), else None."""
    if len(text) > MAX_FILE_BYTES:
        return error("WL110", f"the text is {len(text):,} characters, over the limit of "
                     f"{MAX_FILE_BYTES:,}", _point(filename, 1, 1))
    long = _LONG_LINE.search(text)
    if long is None:
        return None
    line = text.count("\n", 0, long.start()) + 1
    return error("WL110", f"line {line} is longer than {MAX_LINE_CHARS:,} characters",
                 _point(filename, line, 1),
                 "a string literal of this size is larger than any context; use `filler`")


def too_many_tokens(tokens: Iterator[Any], filename: str,
                    limit: int = MAX_TOKENS) -> Diagnostic | None:
    """WL110 at the first token past `limit` of a lexer's `tokens` (read no further), else
    None. Counting before parsing keeps a refused file from building a tree first."""
    for count, tok in enumerate(tokens, 1):
        if count > limit:
            return error("WL110", f"the file has more than {limit:,} tokens",
                         _point(filename, tok.line, tok.column),
                         "a workload file is a few KB; generate repeated parts with `repeat` "
                         "or `for`")
    return None


def too_deep(tree: Any, filename: str, limit: int = MAX_DEPTH) -> Diagnostic | None:
    """WL108 at the first node of a Lark `tree` deeper than `limit`, else None (iterative: the
    tree may be deeper than Python's stack)."""
    stack = [(tree, 1, (1, 1))]
    while stack:
        node, depth, where = stack.pop()
        where = _where(node) or where
        if depth > limit:
            return error("WL108", f"nested too deeply: more than {limit} levels of blocks, "
                         "brackets and operators", _point(filename, *where),
                         "flatten it: a loop instead of nested blocks, fewer brackets")
        stack.extend((child, depth + 1, where) for child in getattr(node, "children", ()))
    return None


def _where(node: Any) -> tuple[int, int] | None:
    """(line, column) of a Lark tree node or token, None when it has none."""
    meta = getattr(node, "meta", node)
    line = getattr(meta, "line", None)
    return (line, getattr(meta, "column", 1)) if line else None


def number_too_large(value: float) -> bool:
    """Whether a number is beyond what a `.wl` value may be (or not finite)."""
    return not abs(value) <= MAX_NUMBER


def _point(filename: str, line: int, col: int) -> ir.Span:
    return ir.Span(file=filename, line=line, col=col, end_line=line, end_col=col + 1)


# ---------------------------------------------------------------- what each place takes

class Bound(NamedTuple):
    """The values a place in a workload takes: at least `low` (above it when `low_open`), at
    most `high`, and whole numbers only when `whole`."""

    low: float | None = None
    high: float | None = None
    whole: bool = False
    low_open: bool = False


PLACES: dict[str, Bound] = {
    "max_tokens": Bound(low=1, whole=True), "abort after": Bound(low=0, whole=True),
    "index": Bound(low=0, whole=True), "wait": Bound(low=0),
    "reading": Bound(low=0, low_open=True), "arrive every": Bound(low=0),
    "burst": Bound(low=1, whole=True), "loop bound": Bound(low=0, whole=True),
    "repeat": Bound(low=0, whole=True), "grow until": Bound(low=0, whole=True),
    "grow by": Bound(low=1, whole=True), "spawn": Bound(low=0, whole=True),
    "session repeat": Bound(low=0, whole=True), "filler": Bound(low=0, whole=True),
    "needle at": Bound(low=0, high=1), "calibrate tokens": Bound(low=1, whole=True),
    "calibrate repeat": Bound(low=1, whole=True), "concurrency": Bound(low=1, whole=True),
    "settle": Bound(low=0), "timeout": Bound(low=0, low_open=True),
    "hit_ratio": Bound(low=0, high=1, low_open=True), "max_context": Bound(low=1, whole=True),
    "first": Bound(low=1, whole=True), "last": Bound(low=1, whole=True),
    "turns every": Bound(low=0), "duration": Bound(low=0, low_open=True),
    "warmup": Bound(low=0), "cooldown": Bound(low=0),
    "slo ttft": Bound(low=0, low_open=True), "slo tpot": Bound(low=0, low_open=True),
    "slo e2e": Bound(low=0, low_open=True),
    "slo attainment": Bound(low=0, high=1, low_open=True),
}
"""Place (a statement's value, a setting, a selector count) -> what it takes."""


def out_of_bounds(place: str, value: float) -> str | None:
    """What is wrong with `value` at `place` ("must be at least 1", "must be a whole number"),
    or None when it fits."""
    b = PLACES[place]
    if b.low is not None and (value <= b.low if b.low_open else value < b.low):
        return f"must be {'above' if b.low_open else 'at least'} {show_value(place, b.low)}"
    if b.high is not None and value > b.high:
        return f"must be at most {show_value(place, b.high)}"
    if b.whole and not float(value).is_integer():
        return "must be a whole number"
    return None


def show_value(place: str, v: float) -> str:
    """`v` as written at `place`: `95%`, `2s`, `8000`."""
    if place in ("needle at", "hit_ratio", "slo attainment"):
        return f"{v * 100:g}%"
    return f"{v:g}s" if place in DURATIONS else f"{v:g}"


DURATIONS = frozenset({"wait", "settle", "timeout", "duration", "warmup", "cooldown",
                       "turns every", "slo ttft", "slo tpot", "slo e2e"})
"""The places whose values are durations (shown with `s`)."""
