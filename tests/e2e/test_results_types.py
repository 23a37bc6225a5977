"""The results contract and its readers type-check strictly: `mypy` (with the pydantic plugin,
pyproject's `[[tool.mypy.overrides]]`, `strict = true`) finds nothing in `results`,
`resultsmodels`, `gates`, `verdicts` and `report/`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args, get_type_hints

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


def untyped(tp: Any) -> bool:
    """Output: whether the annotation `tp` is, or holds, `Any`."""
    return tp is Any or any(untyped(a) for a in get_args(tp))


def test_results_and_measured_hold_no_untyped_part() -> None:
    """No field of `Results` (the results file) or `Measured` (what a run measured, before it
    is judged) is `dict[str, Any]` or holds `Any`: each part is a model of its own."""
    from workloadlang.results import Results
    from workloadlang.run.runner import Measured

    fields = {f"Results.{name}": f.annotation for name, f in Results.model_fields.items()}
    fields.update({f"Measured.{name}": tp for name, tp in get_type_hints(Measured).items()})
    assert [name for name, tp in fields.items() if untyped(tp)] == []
    assert {"Results.engine", "Results.client", "Measured.metrics"} <= set(fields)
