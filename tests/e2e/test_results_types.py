"""The results contract and its readers type-check strictly: `mypy` (with the pydantic plugin,
pyproject's `[[tool.mypy.overrides]]`, `strict = true`) finds nothing in `results`,
`resultsmodels`, `gates`, `verdicts` and `report/`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = ["workloadlang/results.py", "workloadlang/resultsmodels.py", "workloadlang/gates.py",
          "workloadlang/verdicts.py", "workloadlang/report"]


FLAGS = ("disallow_any_generics", "disallow_untyped_calls", "disallow_untyped_defs",
         "disallow_incomplete_defs", "check_untyped_defs", "warn_return_any", "strict_equality")


def test_pyproject_holds_the_strict_modules() -> None:
    """`mypy` alone (as `.ci/run` calls it) reads the strictness from pyproject: `--strict`'s
    per-module flags for these modules only (`strict = true` in an override turns them on for
    every module)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    blocks = [b.split("\n[", 1)[0] for b in text.split("[[tool.mypy.overrides]]")[1:]]
    ours = [b for b in blocks if '"workloadlang.results"' in b]
    assert len(ours) == 1 and all(f"{flag} = true" in ours[0] for flag in FLAGS)
    for module in ("resultsmodels", "gates", "verdicts", "report", "report.*"):
        assert f'"workloadlang.{module}"' in ours[0]
    assert not any(re.search(r"^strict\s*=\s*true", b, re.M) for b in blocks)


@pytest.mark.parametrize("flags", [[], ["--strict"]], ids=["configured", "--strict"])
def test_mypy_strict_finds_nothing_in_the_results_contract_and_its_readers(
        flags: list[str]) -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", *flags, "--no-incremental", *STRICT],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
