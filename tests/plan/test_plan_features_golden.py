"""plan: the dry-run (`--full`) of small workloads that use each newer construct (named texts,
`$copy`, random draws and reading time, arrivals and caps, phases in loops; tool calls, `replay
content`, parallel forks with `keep`, a sweep), against golden text. Golden files:
tests/golden/plan-features/NAME.wl and NAME.txt; regenerate with WL_UPDATE_GOLDEN=1 and read the diff before accepting it."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plan_golden import SALT, check_golden

from workloadlang.cli.main import main as wl_main

FEATURES = Path(__file__).parents[1] / "golden" / "plan-features"


@pytest.mark.parametrize("name", sorted(p.stem for p in FEATURES.glob("*.wl")))
def test_feature_dry_run_matches_golden(capsys, monkeypatch, name: str):
    # from the repository's root: the spans (and so the hash) hold the path as given
    monkeypatch.chdir(FEATURES.parent.parent.parent)
    code = wl_main(["plan", f"tests/golden/plan-features/{name}.wl", "--salt", SALT, "--full"])
    out = capsys.readouterr()
    assert code == 0 and out.err == "", out.err
    check_golden(FEATURES / f"{name}.txt", out.out)
