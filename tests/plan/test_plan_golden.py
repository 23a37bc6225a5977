"""plan: the dry-run of every bundled workload against golden text, and golden plan hashes.

Golden files: tests/golden/plan/<name>.txt (`wl plan NAME --salt golden`), <name>.full.txt
(`--full`) and hashes.json (the `plan_hash` of `wl plan NAME --salt golden --json`); regenerate
with WL_UPDATE_GOLDEN=1 (same switch as tests/language/test_parse.py).

A golden diff after editing a bundled workload (or the planner) is expected: read the diff, and
accept it only if the new schedule is what the edit meant.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from workloadlang.cli.main import main as wl_main
from workloadlang.plan.assemble import plan_hash
from workloadlang.plan.model import Plan
from workloadlang.resources import bundled_workloads

GOLDEN = Path(__file__).parents[1] / "golden" / "plan"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"
BUNDLED = [name for name, _ in bundled_workloads()]
SALT = "golden"
# Params a bundled workload cannot plan without (a required param, the engine's context limit).
NEEDED = {"cache-pressure": ["--kv-size", "65536"], "perf-sim": ["--max-context", "65536"],
          "mooncake": ["--trace", "tests/data/mooncake/conversation_1000.jsonl"]}
FULL = ["agent-sim"]  # summarised by default; its --full listing is golden too


@pytest.fixture(autouse=True)
def at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace's path in mooncake's golden is relative to the repository's root."""
    monkeypatch.chdir(Path(__file__).parents[2])


def wl_plan(capsys: pytest.CaptureFixture[str], name: str, *extra: str) -> str:
    code = wl_main(["plan", name, "--salt", SALT, *NEEDED.get(name, []), *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err == ""
    return out.out


def check_golden(path: Path, got: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run with WL_UPDATE_GOLDEN=1 to create it"
    assert got == path.read_text(encoding="utf-8"), "run with WL_UPDATE_GOLDEN=1 to accept"


def test_the_bundled_workloads_have_goldens():
    assert BUNDLED == ["abort-sim", "agent-sim", "cache-pressure", "chat-rate", "coding-agent",
                       "idle-resume", "mooncake", "needle-test", "perf-sim", "shared-prompt", "tenant-flood"]
    if not UPDATE:
        names = {p.name for p in GOLDEN.glob("*.txt")}
        assert names == {f"{n}.txt" for n in BUNDLED} | {f"{n}.full.txt" for n in FULL}


@pytest.mark.parametrize("name", BUNDLED)
def test_dry_run_matches_golden(capsys, name: str):
    check_golden(GOLDEN / f"{name}.txt", wl_plan(capsys, name))


@pytest.mark.parametrize("name", FULL)
def test_full_dry_run_matches_golden(capsys, name: str):
    full = wl_plan(capsys, name, "--full")
    check_golden(GOLDEN / f"{name}.full.txt", full)
    short = wl_plan(capsys, name)
    n_requests = int(re.search(r"^requests +([\d,]+)$", full, re.M).group(1).replace(",", ""))
    table = full.split("\n\n")[1].splitlines()
    assert len(table) == 2 + n_requests  # header, rule, one row per request
    assert "--full lists each one" in short and "--full lists each one" not in full


def test_plan_hashes_match_golden(capsys):
    got = {}
    for name in BUNDLED:
        text = wl_plan(capsys, name, "--json")
        data = json.loads(text)
        assert data["salt"] == SALT
        got[name] = data["plan_hash"]
        # The hash is of the plan's own content: re-reading the JSON gives the same hash back.
        assert plan_hash(Plan.model_validate_json(text)) == data["plan_hash"]
    path = GOLDEN / "hashes.json"
    check_golden(path, json.dumps(got, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", BUNDLED)
def test_dry_run_header_names_the_json_hash(capsys, name: str):
    text = wl_plan(capsys, name)
    data = json.loads(wl_plan(capsys, name, "--json"))
    assert f"salt {SALT} · plan {data['plan_hash']} ·" in text.splitlines()[2]


def test_wl_plan_and_wl_run_hash_alike_whatever_the_context_limit(capsys):
    """`wl run` learns the context limit from the engine, `wl plan` has it only from
    `--max-context`: the hash leaves the limit out, so the two agree."""
    bare = json.loads(wl_plan(capsys, "abort-sim", "--json"))
    limited = json.loads(wl_plan(capsys, "abort-sim", "--json", "--max-context", "100000"))
    assert (bare["max_context"], limited["max_context"]) == (None, 100000)
    assert bare["plan_hash"] == limited["plan_hash"]
