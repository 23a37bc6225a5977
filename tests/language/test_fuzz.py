"""Fuzzing the frontend: whatever the text, `parse` + `check` (+ `resolve_params`) only ever
return diagnostics or raise `WorkloadError`, and no Lark internals reach a message.

Inputs are the bundled workloads with random edits, and soups of the grammar's own keywords and
punctuation. The suite runs ~2,000 examples; bench/fuzz.py runs the same properties at scale.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadlang import ir
from workloadlang.check import check
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_json, render_text
from workloadlang.evaluate import resolve_params
from workloadlang.parse import parse, parser
from workloadlang.resources import bundled_workloads

TEXTS = [path.read_text(encoding="utf-8") for _, path in bundled_workloads()]
WORDS = sorted({t.pattern.value for t in parser().terminals if t.pattern.type == "str"})
FRAGMENTS = WORDS + [
    "w", "main", "x_1", "$n", "$max_context", "$ttft_threshold", "8k", "1.5M", "500ms", "95%",
    "0", "1..", "..", '"s"', '"', '"\\q"', "ttft{main}", "median(", "if(", "ceil(", "@", "#c\n",
    "\n", "{", "}", "(", ")", "5kb", "$", "1.", "-",
]
INTERNAL = re.compile(r"__ANON|\$END|\b_[A-Z][A-Z_]*\b|Token\(")
SETTINGS = settings(max_examples=1000, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def edited(draw: st.DrawFn) -> str:
    """A bundled workload with one to four random edits (delete, insert, duplicate, swap)."""
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        size = draw(st.integers(1, 24))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if op == "delete":
            text = text[:at] + text[at + size:]
        elif op == "duplicate":
            text = text[:at] + text[at:at + size] * 2 + text[at + size:]
        else:
            piece = draw(st.sampled_from(FRAGMENTS))
            cut = size if op == "replace" else 0
            text = text[:at] + f" {piece} " + text[at + cut:]
    return text


soups = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(" ".join)
wrapped_soups = soups.map(lambda s: "workload w { " + s + " }")


def assert_only_diagnostics(text: str) -> None:
    """The property: diagnostics or WorkloadError, renderable, with no Lark internals."""
    try:
        wl = parse(text, "f.wl")
    except WorkloadError as exc:
        diags = exc.diagnostics
        assert diags and all(d.severity == "error" for d in diags)
    else:
        assert ir.Workload.model_validate_json(wl.model_dump_json()) == wl
        diags = check(wl)
        resolve_params(wl, {}, {"max_context": 100_000})
    for d in diags:
        assert isinstance(d, Diagnostic)
        assert not INTERNAL.search(f"{d.message} {d.hint or ''}"), d
    render_text(diags, {"f.wl": text})
    render_json(diags)


@SETTINGS
@given(edited())
def test_edited_bundled_workloads(text: str):
    assert_only_diagnostics(text)


@settings(SETTINGS, max_examples=500)
@given(soups)
def test_keyword_soups(text: str):
    assert_only_diagnostics(text)


@settings(SETTINGS, max_examples=500)
@given(wrapped_soups)
def test_keyword_soups_inside_a_workload(text: str):
    assert_only_diagnostics(text)


def test_arbitrary_text():
    odd = ["", " ", "\x00", "workload", "workload w {", "}}}}", '"', "é", "workload w {}" * 3]
    for text in odd:
        assert_only_diagnostics(text)
