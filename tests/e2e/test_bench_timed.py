"""bench/: the smoke runs of the bench scripts that read a verdict or a rate from time, at a small
size, beside another `paired` test at most (the others are in test_bench.py, which runs beside
the rest)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_bench import figures

# it reads time, light on the CPU: beside a `paired` test at most; a few long tests
pytestmark = [pytest.mark.paired, pytest.mark.slow]


def test_scale_runs_small(tmp_path: Path) -> None:
    """2 sessions of 3 main steps: 15 requests each (3 steps, 2 sub-agents, a finalize, 3
    re-reads and 3 baselines in its stretch, 3 re-reads for `timing`); steps of 2k."""
    from bench import scale

    out = tmp_path / "scale.json"
    assert scale.main(["--sessions", "2", "--steps", "3", "--step-tokens", "2000",
                       "--keep", str(tmp_path / "runs"), "--json", str(out)]) == 0
    (row,) = figures(out)
    assert (row["exit_code"], row["requests"], row["planned"], row["errors"]) == (0, 30, 30, 0)
    assert row["peak_rss_mb"] > 10 and row["client_cpu_ms_per_request"] > 0
    assert row["client_delay_max_ms"] is not None and row["start_ms"] >= 0
    assert row["gates"]["survival"] == "pass" and row["gates"]["timing"] == "pass"
    assert (tmp_path / "runs" / "run1" / "records.jsonl").exists()


def test_arrivals_runs_small(tmp_path: Path) -> None:
    from bench import arrivals

    out = tmp_path / "arrivals.json"
    assert arrivals.main(["--rate", "20", "--seconds", "1", "--json", str(out)]) == 0
    (row,) = figures(out)
    assert (row["exit_code"], row["arrivals"], row["errors"]) == (0, 20, 0)
    assert 0 <= row["lag_p50_ms"] <= row["lag_p99_ms"] <= row["lag_max_ms"]
    assert 5 < row["rate"] < 80


def test_verdicts_runs_small(monkeypatch, capsys) -> None:
    """The verdict table's bench, one benchmark healthy and degraded on the simulator."""
    from bench import verdicts

    monkeypatch.setattr(sys, "argv", ["verdicts", "--only", "abort-sim", "--faults",
                                      "healthy,drop_aborted", "--no-llama"])
    verdicts.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| abort-sim")]
    assert [row.split(" | ")[2] for row in rows] == ["0", "1"], out


def test_busy_verdicts_runs_small(tmp_path: Path, capsys) -> None:
    """The confusion table's bench, one run of the fast 2k cases: a row each, every session
    judged and counted once."""
    from bench import busy_verdicts

    out = tmp_path / "busy.json"
    assert busy_verdicts.main(["--runs", "1", "--only", "fast 2k", "--json", str(out)]) == 0
    rows = figures(out)
    assert [(r["host"], r["truth"]) for r in rows] == [("fast 2k", "healthy"),
                                                        ("fast 2k", "degraded")]
    for r in rows:
        assert r["sessions"] == 2 and r["right"] + sum(r["wrong"].values()) == 2
        assert sum(r["exit_codes"].values()) == 1
    assert "| fast 2k | healthy |" in capsys.readouterr().out


def test_isolation_cost_runs_small(tmp_path: Path) -> None:
    """One run of default agent-sim with isolation and one without: the figures hold to each
    other (the ratio of the two runs' times), and the isolation's cost is read."""
    from bench import isolation_cost

    out = tmp_path / "cost.json"
    assert isolation_cost.main(["--runs", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    this, plain = doc["rows"]
    assert (this["variant"], plain["variant"]) == ("this", "no isolation")
    assert this["this_over_it"] == 1.0 and this["median_s"] > 0
    assert plain["this_over_it"] == pytest.approx(this["median_s"] / plain["median_s"], rel=0.01)
    assert doc["costs"][0]["isolated_requests"] >= 30  # 3 sessions x 10 timed alone, and tries
