"""Bad `.wl` files -> the exact rendered diagnostics (syntax and semantic), one pair per case.

tests/golden/errors/NAME.wl is the input, NAME.txt the expected `render_text` output (file names
relative to that folder). Regenerate with WL_UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workloadlang.check import check
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_text
from workloadlang.parse import parse

FOLDER = Path(__file__).parent / "golden" / "errors"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"
CASES = sorted(p.stem for p in FOLDER.glob("*.wl"))


def diagnose(text: str, filename: str) -> list[Diagnostic]:
    try:
        return check(parse(text, filename))
    except WorkloadError as exc:
        return exc.diagnostics


def test_there_are_enough_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES)
def test_rendered_diagnostics_match_golden(case: str):
    source = (FOLDER / f"{case}.wl").read_text(encoding="utf-8")
    diags = diagnose(source, f"{case}.wl")
    assert diags, "a bad workload must produce at least one diagnostic"
    got = render_text(diags, {f"{case}.wl": source}) + "\n"
    golden = FOLDER / f"{case}.txt"
    if UPDATE:
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8"), "run with WL_UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("case", CASES)
def test_no_lark_internals_reach_the_user(case: str):
    source = (FOLDER / f"{case}.wl").read_text(encoding="utf-8")
    for d in diagnose(source, f"{case}.wl"):
        text = f"{d.message} {d.hint or ''}"
        assert "__ANON" not in text and "_LBRACE" not in text and "$END" not in text
