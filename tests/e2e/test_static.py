"""The static checks (docs/architecture.md, "Static checks"): ruff at zero findings over the
repository, mypy configured as written (the pydantic plugin, Python 3.10, `--strict`'s flags on
the strict modules and only there), and `.ci/run` running both before the tests.

mypy itself runs in `.ci/run` (the whole package at once); here its configuration is read back
through mypy's own option parser, so a flag mypy adds to `--strict` fails this test until the
strict modules have it too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = ("workloadlang.api", "workloadlang.run.executor", "workloadlang.run.record",
          "workloadlang.wire", "workloadlang.wire.pool", "workloadlang.results",
          "workloadlang.gates", "workloadlang.report.tables")
"""Modules the strict override covers (`api`, `run.*`, `wire.*`, the results contract and its
readers), a few of each."""
DEFAULT = ("workloadlang.evaluate", "workloadlang.plan.planner", "workloadlang.cli.main")
"""Modules checked at mypy's default settings."""


def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff is in the test extra")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_configuration_is_explicit() -> None:
    """`select` (not ruff's defaults, not a user's configuration), the target and the length."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "[tool.ruff]" in text and "[tool.ruff.lint]" in text
    assert 'target-version = "py310"' in text and "line-length = 100" in text
    assert 'select = ["E", "W", "F", "I", "B", "UP"]' in text
    assert "extend-select" not in text


def _mypy_options(monkeypatch: pytest.MonkeyPatch) -> object:
    """The options mypy reads from the repository's pyproject.toml."""
    main = pytest.importorskip("mypy.main", reason="mypy is in the test extra")
    monkeypatch.chdir(ROOT)
    return main.process_options([])[1]


def _strict_flags() -> dict[str, object]:
    """The per-module options `--strict` sets, as mypy itself lists them."""
    from mypy.main import process_options
    from mypy.options import PER_MODULE_OPTIONS, Options

    strict = process_options(["--strict", "--config-file=", "-c", "pass"])[1]
    plain = Options()
    return {k: getattr(strict, k) for k in PER_MODULE_OPTIONS
            if getattr(strict, k) != getattr(plain, k)}


def test_mypy_reads_the_package_as_python_310_with_the_pydantic_plugin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    options = _mypy_options(monkeypatch)
    assert Path(options.config_file).resolve() == ROOT / "pyproject.toml"
    assert options.python_version == (3, 10)
    assert options.plugins == ["pydantic.mypy"]
    assert options.files == ["workloadlang"]
    assert options.warn_redundant_casts


def test_strict_modules_have_every_strict_flag_and_the_others_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    options = _mypy_options(monkeypatch)
    flags = _strict_flags()
    assert {"disallow_untyped_defs", "disallow_any_generics", "warn_return_any"} <= set(flags)
    for module in STRICT:
        per_module = options.clone_for_module(module)
        missing = {k: v for k, v in flags.items() if getattr(per_module, k) != v}
        assert not missing, f"{module} lacks --strict's {missing}"
    for module in DEFAULT:  # `strict = true` in an override would have reached these too
        per_module = options.clone_for_module(module)
        assert not per_module.disallow_untyped_defs, module
        assert not per_module.disallow_any_generics, module


def test_ci_runs_ruff_and_mypy_before_the_tests() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ruff, mypy = script.find("python -m ruff check"), script.find("python -m mypy")
    tests = script.find("python -m pytest")
    assert -1 < ruff < tests and -1 < mypy < tests, "ruff and mypy run before pytest"
    assert "set -euo pipefail" in script  # a finding (a non-zero exit) stops the run


def test_the_test_extra_pins_ruff_and_mypy_to_a_minor_version() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"ruff>=0.17,<0.18"' in text and '"mypy>=2.4,<2.5"' in text
