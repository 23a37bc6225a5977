"""The suite's scheduling under xdist (`scheduling.py`): an `alone` test (every `llama` test is
one) runs with no other test in flight, the others run side by side.

A small suite in a temp dir, run by a real `pytest -n 2` with the plugin: each test writes when it
ran and on which worker, then sleeps, so that without the lock an `alone` test would overlap a
test on the other worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SUITE = '''
import json, os, time
import pytest

@pytest.fixture(autouse=True)
def ran(request):
    t0 = time.time()
    yield
    time.sleep(0.25)
    row = {"name": request.node.name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
           "alone": request.node.get_closest_marker("alone") is not None, "t0": t0,
           "t1": time.time()}
    with open(os.environ["RAN_FILE"], "a") as f:
        f.write(json.dumps(row) + "\\n")

@pytest.mark.parametrize("i", range(8))
def test_shared(i):
    pass

@pytest.mark.alone
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    pass

@pytest.mark.llama
@pytest.mark.parametrize("i", range(3))
def test_llama(i):
    pass
'''


def run_suite(tmp_path: Path) -> list[dict]:
    """Run SUITE with `-n 2 -p scheduling`; output: one row per test."""
    (tmp_path / "test_small.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llama: a llama test\n")
    ran = tmp_path / "ran.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(RAN_FILE=str(ran),
               PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "scheduling",
         "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), "test_small.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in ran.read_text().splitlines()]


def overlap(a: dict, b: dict) -> bool:
    return a["t0"] < b["t1"] and b["t0"] < a["t1"]


def test_alone_tests_run_with_nothing_else_in_flight_and_the_others_side_by_side(tmp_path):
    rows = run_suite(tmp_path)
    assert len(rows) == 13 and {r["worker"] for r in rows} == {"gw0", "gw1"}
    alone = [r for r in rows if r["alone"]]
    assert len(alone) == 5  # the two marked, and the three llama tests
    for a in alone:
        others = [r for r in rows if r is not a and overlap(a, r)]
        assert not others, (a, others)
    shared = [r for r in rows if not r["alone"]]
    assert any(overlap(a, b) for a in shared for b in shared if a is not b), \
        "the shared tests ran one at a time"
