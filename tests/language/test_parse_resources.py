"""resources: the grammar and bundled workloads, from a checkout and from an installed wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from workloadlang.resources import bundled_workload_path, bundled_workloads, read_grammar

ROOT = Path(__file__).resolve().parents[2]


def test_grammar_is_the_repository_file():
    assert read_grammar() == (ROOT / "grammars" / "workload.lark").read_text(encoding="utf-8")


def test_bundled_workloads_by_name():
    names = [name for name, _ in bundled_workloads()]
    assert names == sorted(p.stem for p in (ROOT / "workloads").glob("*.wl"))
    path = bundled_workload_path("agent-sim")
    assert path is not None and path.name == "agent-sim.wl"
    assert bundled_workload_path("agent-sim.wl").read_text() == path.read_text()
    assert bundled_workload_path("no-such-workload") is None


@pytest.mark.slow
def test_installed_wheel_ships_grammar_and_workloads(tmp_path: Path):
    """Build the wheel, unpack it alone on sys.path, and parse a bundled workload from it."""
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                            "--outdir", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True)
    assert built.returncode == 0, f"cannot build the wheel: {built.stderr[-500:]}"
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "workloadlang" / "_data" / "grammars" / "workload.lark").is_file()
    script = ("from workloadlang.resources import bundled_workloads, bundled_workload_path\n"
              "from workloadlang.parse import parse\n"
              "import workloadlang.resources as r\n"
              "assert '_data' in str(bundled_workload_path('agent-sim')), r.__file__\n"
              "print(len(bundled_workloads()), parse(bundled_workload_path('agent-sim')"
              ".read_text(), 'agent-sim.wl').name)\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(bundled_workloads())), "agent_sim"]
