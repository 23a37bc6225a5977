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
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, field_validator

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

    @field_validator("message", "hint")
    @classmethod
    def _short(cls, text: str | None) -> str | None:
        """Source text quoted in a message is clipped: a 10 MB word is not echoed whole."""
        return None if text is None else clip(_LONG_QUOTE.sub(_clip_quote, text), MAX_MESSAGE)


MAX_QUOTE = 60
"""Characters of a quoted piece of source (`...`) a message shows before `…`."""
MAX_MESSAGE = 1000
_LONG_QUOTE = re.compile(r"`([^`]{%d,})`" % (MAX_QUOTE + 1))


def clip(text: str, width: int = MAX_QUOTE) -> str:
    """`text`, or its first `width` characters and `…` when it is longer."""
    return text if len(text) <= width else text[:width] + "…"


def _clip_quote(m: re.Match) -> str:
    return f"`{clip(m.group(1))}`"


class WorkloadError(Exception):
    """A workload could not be used; `diagnostics` says why (at least one error)."""

    def __init__(self, diagnostics: Sequence[Diagnostic], text: str | None = None):
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.text = text  # the source as far as it could be read, when the caller lacks it
        first = self.diagnostics[0].message if self.diagnostics else "invalid workload"
        super().__init__(first)


def error(code: str, message: str, span: Span | None, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, severity="error", message=message, span=span, hint=hint)


def warning(code: str, message: str, span: Span | None, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, severity="warning", message=message, span=span, hint=hint)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like `word` (difflib ratio at least 0.6), or None (also for a word
    too long to be a misspelling of anything)."""
    if len(word) > 4 * MAX_QUOTE:
        return None
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
    lines = {name: _Lines(text) for name, text in sources.items()}
    return "\n\n".join(_render_one(d, lines) for d in diagnostics)


def _render_one(d: Diagnostic, sources: Mapping[str, _Lines]) -> str:
    lines = [_headline(d)]
    if d.span is not None and d.span.file in sources:
        lines += _excerpt(d.span, sources[d.span.file].line(d.span.line))
    if d.hint:
        lines.append(f"{'':>{GUTTER - 2}}= help: {d.hint}")
    return "\n".join(lines)


class _Lines:
    """A source text's lines by number, its line starts found once (not per diagnostic)."""

    def __init__(self, text: str):
        self.text = text
        self.starts: list[int] | None = None

    def line(self, number: int) -> str | None:
        """Line `number` (1-based) without its line break; None past the end."""
        if self.starts is None:
            self.starts = [0, *(m.end() for m in re.finditer("\n", self.text))]
        if not 1 <= number <= len(self.starts):
            return None
        start = self.starts[number - 1]
        end = self.starts[number] - 1 if number < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r")


def _headline(d: Diagnostic) -> str:
    where = f"{d.span.file}:{d.span.line}:{d.span.col}: " if d.span else ""
    return f"{where}{d.severity}[{d.code}]: {d.message}"


_CONTROLS = {c: "\ufffd" for c in (*range(0x20), *range(0x7f, 0xa0)) if c != 0x09}
"""Control characters (but tab) are shown as `�`: a source line cannot drive the terminal."""
MAX_EXCERPT = 160
"""Characters of a source line an excerpt shows: a longer line is cut around the span."""


def _excerpt(span: Span, line: str | None) -> list[str]:
    """The span's first source line and a caret line under the spanned part of it (a window of
    the line around the span when the line is long)."""
    if line is None:
        return []
    start = min(max(span.col - 1, 0), len(line))
    end = span.end_col - 1 if span.end_line == span.line else len(line)
    if len(line) > MAX_EXCERPT:
        cut = max(0, start - MAX_EXCERPT // 4)
        before, after = ("…" if cut else ""), ("…" if cut + MAX_EXCERPT < len(line) else "")
        window = line[cut:cut + MAX_EXCERPT]
        line = before + window + after
        start, end = start - cut + len(before), min(end - cut, len(window)) + len(before)
    width = max(end - start, 1)
    line = line.translate(_CONTROLS)
    # Keep tabs in the padding so the carets line up under the source however tabs render.
    pad = "".join(c if c == "\t" else " " for c in line[:start])
    return [f"{span.line:>{GUTTER}} | {line}", f"{'':>{GUTTER}} | {pad}{'^' * width}"]


# ---------------------------------------------------------------- JSON rendering

_LIST = TypeAdapter(list[Diagnostic])


def render_json(diagnostics: Iterable[Diagnostic]) -> str:
    """All diagnostics as a JSON array of `{code, severity, message, span, hint}` objects."""
    return _LIST.dump_json(list(diagnostics), indent=2).decode()
