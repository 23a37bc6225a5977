"""The report renders for results of each bundled benchmark made by real runs against the
embedded simulator (`wl run NAME --sim --no-viz -o out.json`, small params)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workloadlang.cli.main import main
from workloadlang.report import load_results, write_report

# Small params: every run takes a second or two on the simulator.
RUNS: dict[str, list[str]] = {
    "abort-sim": ["-p", "context_tokens=2000", "-p", "thinking_tokens=50"],
    "agent-sim": ["-p", "sessions=3", "-p", "main_tokens=12000", "-p", "step_tokens=2000",
                  "-p", "sub_tokens=6000", "-p", "finalize_tokens=500"],
    "cache-pressure": ["-p", "kv_size=65536"],
    "needle-test": ["-p", "lengths=2000,30000,300000"],
    "perf-sim": ["-p", "step_tokens=2000", "-p", "runs=2", "-p", "context_limit=16000"],
}
CHARTS = {"abort-sim": ["abort"], "agent-sim": ["sessions", "speed", "theory"],
          "cache-pressure": ["retention"], "needle-test": ["needles"], "perf-sim": ["speed"]}
CHARTS = {name: [*kinds, "latency"] for name, kinds in CHARTS.items()}  # every run has one


def sim_run(name: str, out: Path, extra: list[str] = ()) -> Path:
    """`wl run NAME --sim --no-viz -o OUT` with the small params, in this process (the
    simulator serves from its own child process either way); exit 0 or 1 (a gate failed)."""
    argv = ["run", name, "--sim", "--no-viz", "-o", str(out), *RUNS[name], *extra]
    code = main(argv)
    assert code in (0, 1), f"wl {' '.join(argv)}: exit {code}"
    return out


@pytest.fixture(scope="module")
def sim_results(tmp_path_factory) -> dict[str, Path]:
    """One results file per bundled workload, made once for the module."""
    folder = tmp_path_factory.mktemp("sim-results")
    return {name: sim_run(name, folder / f"{name}.json") for name in RUNS}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_report_of_a_real_simulator_run(name, sim_results, tmp_path):
    res = load_results(sim_results[name])
    html = write_report([res], tmp_path / "r.html").read_text()
    assert re.findall(r'data-chart="(\w+)"', html) == CHARTS[name]
    for g in res.gates:  # every gate, with its verdict and its .wl line quoted
        assert f"<strong>{g.name}</strong>" in html
        assert f"{res.source}:{g.line}" in html
        assert re.search(rf"<code>{re.escape(g.name)}: (overall|each session)", html), g.name
    assert html.count("<tr><td>") + html.count("<tr class=") >= len(res.records)
    assert res.plan_hash in html and res.salt in html


def test_needle_chart_shows_the_lost_needle(sim_results, tmp_path):
    res = load_results(sim_results["needle-test"])
    found = {r.prompt_tokens: r.expect_ok for r in res.records}
    assert True in found.values() and False in found.values(), found  # the sim's window
    html = write_report([res], tmp_path / "n.html").read_text()
    assert html.count("<td>not found</td>") == list(found.values()).count(False)


def test_retention_from_the_simulator_marks_its_first_miss(sim_results, tmp_path):
    res = load_results(sim_results["cache-pressure"])
    verify = [r for r in res.records if r.kind == "resend" and not r.skipped]
    html = write_report([res], tmp_path / "c.html").read_text()
    misses = [i + 1 for i, r in enumerate(verify) if r.hit is False]
    if misses:
        assert f"first miss #{misses[0]}" in html
    assert "calibrated threshold" in html or res.calibration.threshold_s is None


def test_two_simulator_runs_overlay(sim_results, tmp_path):
    again = sim_run("perf-sim", tmp_path / "again.json")
    runs = [load_results(sim_results["perf-sim"]), load_results(again)]
    html = write_report(runs, tmp_path / "o.html", labels=["before", "after"]).read_text()
    assert "before: mean of 2 conversations" in html and "after: mean of 2 conversations" in html
    assert "Overlaid: before, after." in html


def test_results_json_has_what_the_report_reads(sim_results):
    """A guard on the runner's summary JSON: the fields the report draws from."""
    raw = json.loads(sim_results["agent-sim"].read_text())
    for key in ("workload", "source", "params", "salt", "plan_hash", "engine", "started_at",
                "calibration", "gates", "verdicts", "report", "records"):
        assert key in raw
    rec = raw["records"][1]
    for key in ("planned_prompt_tokens", "cached_tokens", "cached_source", "expected_cached",
                "expected_source", "reuse", "hit", "hit_basis", "ttft_s", "ttft_agrees",
                "t_start_s", "prefix_source", "planned_expected_cached", "pp_tps", "tg_tps"):
        assert key in rec
