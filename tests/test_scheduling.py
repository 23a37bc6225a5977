"""The suite's scheduling under xdist (`scheduling.py`): an `alone` test (every `llama` test is
one) runs with no other test in flight, a `paired` test beside another `paired` test only, the
others side by side.

A small suite in a temp dir, run by a real `pytest -n 2` with the plugin: each test writes when it
ran and on which worker, then sleeps, so that without the lock an `alone` test would overlap a
test on the other worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scheduling import in_suite_order

TESTS = Path(__file__).resolve().parent

SUITE = '''
import json, os, time
import pytest

@pytest.fixture(autouse=True)
def ran(request):
    t0 = time.time()
    yield
    time.sleep(0.25)
    row = {"name": request.node.name, "file": request.node.path.name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
           "alone": request.node.get_closest_marker("alone") is not None,
           "paired": request.node.get_closest_marker("paired") is not None, "t0": t0,
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


def run_suite(tmp_path: Path, files: dict[str, str] | None = None, *flags: str) -> list[dict]:
    """Run `files` (name: text; SUITE by default) with `-n 2 -p scheduling` and `flags`;
    output: one row per test."""
    for name, text in (files or {"test_small.py": SUITE}).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    llama: a llama test\n")
    ran = tmp_path / "ran.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(RAN_FILE=str(ran),
               PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "scheduling",
         "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), *flags],
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


# the fixture that records each test, and a file's tests: `alone` ones or shared ones
HEAD = SUITE.split("@pytest.mark.parametrize")[0]
ALONE_FILE = HEAD + "@pytest.mark.alone\n@pytest.mark.parametrize('i', range(2))\ndef test_a(i):\n    pass\n"


def shared_file(n: int) -> str:
    """A test file of `n` shared tests."""
    return HEAD + f"@pytest.mark.parametrize('i', range({n}))\ndef test_s(i):\n    pass\n"


def test_the_files_with_alone_tests_run_after_the_others(tmp_path):
    """The `alone` file is collected first; run as pyproject runs the suite (a file to a worker,
    in scheduling.py's order), the shared files are handed out first and run side by side: the
    first `alone` test starts only once a worker has run a whole shared file (xdist hands each
    worker two files at the start, so the other may still be on its second)."""
    files = {"test_a_timed.py": ALONE_FILE, "test_b.py": shared_file(3),
             "test_c.py": shared_file(4)}
    rows = run_suite(tmp_path, files, "--dist", "loadfile", "--no-loadscope-reorder")
    alone = [r for r in rows if r["alone"]]
    shared = [r for r in rows if not r["alone"]]
    assert len(alone) == 2 and len(shared) == 7
    ends = [max(r["t1"] for r in shared if r["file"] == f) for f in ("test_b.py", "test_c.py")]
    assert min(ends) <= min(r["t0"] for r in alone), rows
    assert any(overlap(a, b) for a in shared for b in shared if a is not b)


def paired_file(n: int) -> str:
    """A test file of `n` paired tests."""
    return HEAD + f"@pytest.mark.paired\n@pytest.mark.parametrize('i', range({n}))\n" \
        "def test_p(i):\n    pass\n"


def test_paired_tests_run_beside_each_other_and_never_beside_a_shared_or_alone_one(tmp_path):
    """Two paired files, two shared ones and an `alone` one, a file to a worker: the paired
    tests overlap one another, never a test of another kind. The shared files are of 6 tests
    and 1, so that the worker given the short one turns to a paired file while the other still
    runs shared tests."""
    files = {"test_p1.py": paired_file(8), "test_p2.py": paired_file(8),
             "test_s1.py": shared_file(6), "test_s2.py": shared_file(1),
             "test_z.py": ALONE_FILE}
    rows = run_suite(tmp_path, files, "--dist", "loadfile", "--no-loadscope-reorder")
    paired = [r for r in rows if r["paired"]]
    assert len(paired) == 16 and len(rows) == 25
    for p in paired:
        others = [r for r in rows if r is not p and not r["paired"] and overlap(p, r)]
        assert not others, (p, others)
    assert any(overlap(a, b) for a in paired for b in paired if a["file"] != b["file"]), \
        "the paired tests ran one at a time"
    for a in (r for r in rows if r["alone"]):
        assert not [r for r in rows if r is not a and overlap(a, r)]


class Item:
    """What `in_suite_order` reads of a test: its node id and its kind's marker, if any."""

    def __init__(self, nodeid: str, alone: bool = False, paired: bool = False,
                 slow: bool = False) -> None:
        self.nodeid, self.alone, self.paired, self.slow = nodeid, alone, paired, slow

    def get_closest_marker(self, name: str) -> object:
        return (name == "alone" and self.alone) or (name == "paired" and self.paired) \
            or (name == "slow" and self.slow) or None


def test_the_suite_order_keeps_each_file_together_paired_then_alone_last_bigger_first():
    items = [Item("t/a.py::x", alone=True), Item("t/a.py::y"), Item("t/b.py::x"),
             Item("t/c.py::x"), Item("t/c.py::y"), Item("t/d.py::x", alone=True),
             Item("t/d.py::y", alone=True), Item("t/d.py::z", alone=True)]
    got = [i.nodeid for i in in_suite_order(items)]  # type: ignore[arg-type]
    assert got == ["t/c.py::x", "t/c.py::y", "t/b.py::x", "t/d.py::x", "t/d.py::y",
                   "t/d.py::z", "t/a.py::x", "t/a.py::y"]
    paired = [Item("t/e.py::x", paired=True), Item("t/f.py::x", paired=True),
              Item("t/f.py::y", alone=True), Item("t/g.py::x"), Item("t/h.py::x", paired=True),
              Item("t/h.py::y", paired=True), Item("t/i.py::x", paired=True, slow=True)]
    got = [i.nodeid for i in in_suite_order(paired)]  # type: ignore[arg-type]
    assert got == ["t/g.py::x", "t/i.py::x", "t/h.py::x", "t/h.py::y", "t/e.py::x",
                   "t/f.py::x", "t/f.py::y"]
