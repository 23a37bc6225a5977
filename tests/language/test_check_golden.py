"""Bad `.wl` files -> the exact rendered diagnostics (syntax and semantic), one pair per case.

tests/golden/errors/NAME.wl is the input, NAME.txt the expected `render_text` output (file names
relative to that folder). Regenerate with WL_UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workloadlang.api import read_source
from workloadlang.check import check
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_text
from workloadlang.parse import parse

FOLDER = Path(__file__).parents[1] / "golden" / "errors"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"
CASES = sorted(p.stem for p in FOLDER.glob("*.wl"))


def diagnose(text: str, filename: str) -> list[Diagnostic]:
    try:
        return check(parse(text, filename))
    except WorkloadError as exc:
        return exc.diagnostics


def load(case: str) -> tuple[str, list[Diagnostic]]:
    """A case's text as `wl check` reads it (bytes; a file that is no UTF-8 text is a
    diagnostic shown over its lossy decoding) and its diagnostics."""
    try:
        source = read_source(FOLDER / f"{case}.wl", f"{case}.wl")
    except WorkloadError as exc:
        return exc.text or "", exc.diagnostics
    return source, diagnose(source, f"{case}.wl")


def test_there_are_enough_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES)
def test_rendered_diagnostics_match_golden(case: str):
    source, diags = load(case)
    assert diags, "a bad workload must produce at least one diagnostic"
    got = render_text(diags, {f"{case}.wl": source}) + "\n"
    golden = FOLDER / f"{case}.txt"
    if UPDATE:
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8"), "run with WL_UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("case", CASES)
def test_no_lark_internals_reach_the_user(case: str):
    for d in load(case)[1]:
        text = f"{d.message} {d.hint or ''}"
        assert "__ANON" not in text and "_LBRACE" not in text and "$END" not in text
