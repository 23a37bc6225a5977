"""`wl probe`'s experiments are ordinary bundled workloads (`probes/NAME`): each parses, checks
without a warning, and plans at its defaults (its dry-run against a golden file:
tests/golden/probes/NAME.txt, `wl plan probes/NAME --salt golden`; regenerate with
WL_UPDATE_GOLDEN=1 and read the diff); `wl list` shows them; `wl plan` and the API load them
by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workloadlang import api
from workloadlang.check import check
from workloadlang.cli.main import main as wl_main
from workloadlang.resources import bundled_workloads, probe_workloads

GOLDEN = Path(__file__).parents[1] / "golden" / "probes"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"
PROBES = [name for name, _ in probe_workloads()]


def test_the_probe_family_is_bundled_apart():
    assert PROBES == ["probes/abort", "probes/capacity", "probes/granularity", "probes/idle"]
    assert not any(name.startswith("probes/") for name, _ in bundled_workloads())


@pytest.mark.parametrize("name", PROBES)
def test_each_checks_cleanly_and_plans(name: str):
    source = api.load(name)
    wl = api.parse_checked(source)
    assert check(wl) == []
    plan = api.make_plan(wl, source, {}, salt="golden")
    assert plan.requests


@pytest.mark.parametrize("name", PROBES)
def test_dry_run_matches_golden(capsys, name: str):
    code = wl_main(["plan", name, "--salt", "golden"])
    out = capsys.readouterr()
    assert code == 0, out.err
    path = GOLDEN / f"{name.split('/')[1]}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(out.out, encoding="utf-8")
    assert out.out == path.read_text(encoding="utf-8"), "run with WL_UPDATE_GOLDEN=1 to accept"


def test_wl_list_shows_them(capsys):
    assert wl_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "wl probe's experiment" in out
    assert all(name in out for name in PROBES)


def test_the_capacity_experiment_reads_what_another_run_filled():
    """Its `reads` are sent with `expect cached`: a context sent before the run is expected
    whole, so `until miss` stops at the first one the engine lost."""
    source = api.load("probes/capacity")
    plan = api.make_plan(api.parse_checked(source), source,
                         {"order": "given", "sends": "", "reads": "a,b"}, salt="s")
    assert [r.label for r in plan.requests] == ["read", "read"]
    assert all(r.expected_cached == r.prompt_tokens - 1 and r.stop_on == "miss"
               for r in plan.requests)
