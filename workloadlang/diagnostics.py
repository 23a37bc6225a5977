"""Diagnostics as data, and their two renderings.

Input: `Diagnostic`s (from `parse`, `check`, `evaluate.resolve_params` or the planner) and the
source texts they point into. Output: text in the miniwdl/rustc shape

    file.wl:12:5: error[WL201]: unknown parameter `$step_tokns`
       12 |     user filler $step_tokns
          |                 ^^^^^^^^^^^
       = help: did you mean `$step_tokens`?

or JSON (a list of objects). Codes: WL1xx syntax, WL2xx names, WL3xx types and units, WL4xx
plan time; docs/diagnostics.md lists them all.

Exceptions: `WorkloadError` carries a non-empty list of diagnostics; it is the only exception
`parse` raises for a bad file.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from workloadlang.ir import Span

Severity = Literal["error", "warning"]


class Diagnostic(BaseModel):
    """One finding: a code (`WL201`), a severity, a message, where, and an optional hint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    severity: Severity = "error"
    message: str
    span: Span | None = None
    hint: str | None = None


class WorkloadError(Exception):
    """A workload could not be used; `diagnostics` says why (at least one error)."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        first = self.diagnostics[0].message if self.diagnostics else "invalid workload"
        super().__init__(first)


def error(code: str, message: str, span: Span | None, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, severity="error", message=message, span=span, hint=hint)


def warning(code: str, message: str, span: Span | None, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, severity="warning", message=message, span=span, hint=hint)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like `word` (difflib ratio at least 0.6), or None."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, candidates: Iterable[str], fmt: str = "`{}`") -> str | None:
    """A "did you mean ...?" hint for the closest candidate, or None when nothing is close."""
    close = closest(word, candidates)
    return f"did you mean {fmt.format(close)}?" if close else None


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Source order (diagnostics without a span last), then by code: a stable order for output."""
    def key(d: Diagnostic) -> tuple:
        s = d.span
        return (s is None, s.file if s else "", s.line if s else 0, s.col if s else 0, d.code)
    return sorted(diagnostics, key=key)


# ---------------------------------------------------------------- text rendering

GUTTER = 5  # width of the line-number column, as in `   12 |`


def render_text(diagnostics: Iterable[Diagnostic], sources: Mapping[str, str]) -> str:
    """All diagnostics as text, separated by blank lines; `sources` maps file name to its text."""
    return "\n\n".join(_render_one(d, sources) for d in diagnostics)


def _render_one(d: Diagnostic, sources: Mapping[str, str]) -> str:
    lines = [_headline(d)]
    if d.span is not None and d.span.file in sources:
        lines += _excerpt(d.span, sources[d.span.file])
    if d.hint:
        lines.append(f"{'':>{GUTTER - 2}}= help: {d.hint}")
    return "\n".join(lines)


def _headline(d: Diagnostic) -> str:
    where = f"{d.span.file}:{d.span.line}:{d.span.col}: " if d.span else ""
    return f"{where}{d.severity}[{d.code}]: {d.message}"


def _excerpt(span: Span, text: str) -> list[str]:
    """The span's first source line and a caret line under the spanned part of it."""
    source_lines = text.split("\n")
    if not 1 <= span.line <= len(source_lines):
        return []
    line = source_lines[span.line - 1].rstrip("\r")
    start = min(max(span.col - 1, 0), len(line))
    end = span.end_col - 1 if span.end_line == span.line else len(line)
    width = max(end - start, 1)
    # Keep tabs in the padding so the carets line up under the source however tabs render.
    pad = "".join(c if c == "\t" else " " for c in line[:start])
    return [f"{span.line:>{GUTTER}} | {line}", f"{'':>{GUTTER}} | {pad}{'^' * width}"]


# ---------------------------------------------------------------- JSON rendering

_LIST = TypeAdapter(list[Diagnostic])


def render_json(diagnostics: Iterable[Diagnostic]) -> str:
    """All diagnostics as a JSON array of `{code, severity, message, span, hint}` objects."""
    return _LIST.dump_json(list(diagnostics), indent=2).decode()
