"""The rate search's steps (pure: the points so far -> the next value), its answer when the
points are noisy, and its results file in `wl report` and the terminal table (docs/cli.md "Rate
search")."""

from __future__ import annotations

import pytest

from workloadlang import latency, ratesearch
from workloadlang.ratesearch import SearchError, Tried, next_value, outcome, parse_range
from workloadlang.report import sample
from workloadlang.report.sweeppage import render_sweep_html
from workloadlang.results import Slo
from workloadlang.sweepresults import SweepResults, search_line, table


def run_search(capacity: float, low: float, high: float, whole: bool = False,
               precision: float = 0.05, runs: int = 12) -> list[float]:
    """The values tried against an engine that sustains exactly up to `capacity`."""
    tried: list[Tried] = []
    while (v := next_value(tried, low, high, precision, whole, runs)) is not None:
        tried.append(Tried(value=v, sustained=v <= capacity))
    return [t.value for t in tried]


def test_doubles_then_halves_the_interval_to_the_precision() -> None:
    assert run_search(10.5, 2, 40) == [2, 4, 8, 16, 12, 10, 11, 10.5]
    # stopped: 10.5 sustained, 11 not, 11 / 10.5 - 1 < 5 %
    assert run_search(100, 2, 40) == [2, 4, 8, 16, 32, 40]  # the range's top sustained
    assert run_search(1, 2, 40) == [2]  # not even LOW


def test_an_int_param_stops_one_apart() -> None:
    assert run_search(13, 1, 64, whole=True) == [1, 2, 4, 8, 16, 12, 14, 13]


def test_at_most_the_runs_asked_for() -> None:
    assert len(run_search(10.5, 1, 1000, precision=0.001, runs=5)) == 5


def test_a_value_sustained_above_a_failure_does_not_count() -> None:
    tried = [Tried(value=4, sustained=True), Tried(value=8, sustained=False),
             Tried(value=6, sustained=True), Tried(value=12, sustained=True)]  # noise at 12
    found = outcome("rate", 4, 16, 0.05, tried, 12)
    assert found.highest == 6 and found.stopped == "sustained at 6, not at 8"
    assert next_value(tried, 4, 16) == 7


@pytest.mark.parametrize("text, said", [
    ("rate=1..64", None), ("rate=0..4", "LOW must be above 0"), ("rate=4..4", "under HIGH"),
    ("rate=a..4", "must be numbers"), ("rate=1-4", "NAME=LOW..HIGH"), ("=1..4", "NAME=LOW"),
])
def test_the_range_on_the_command_line(text: str, said: str | None) -> None:
    if said is None:
        assert parse_range(text) == ("rate", 1.0, 64.0)
        return
    with pytest.raises(SearchError, match=said):
        parse_range(text)


def point(rate: float, met: int) -> object:
    rs = [sample.record(id=f"r{i}", seq=i, t_start_s=i / rate, e2e_s=0.2, ttft_s=0.05,
                        slo_met=i < met, prompt_tokens=10, completion_tokens=4)
          for i in range(10)]
    res = sample.results("w", "w.wl", rs, gates=[], params={"rate": rate})
    return res.model_copy(update={"performance": latency.performance(rs, Slo(ttft_s=0.1))})


def test_a_search_file_reports_the_answer_and_each_points_verdict() -> None:
    points = [point(2, 10), point(4, 10), point(8, 3)]
    assert [ratesearch.sustained(p) for p in points] == [True, True, False]
    tried = [Tried(value=v, sustained=ratesearch.sustained(p)) for v, p in zip((2, 4, 8), points)]
    s = SweepResults(workload="w", param="rate", values=["2", "4", "8"], points=points,
                     exit_code=0, search=outcome("rate", 2, 16, 0.05, tried, 12))
    line = search_line(s)
    assert line == ("highest rate sustained: 4 (sustained at 4, not at 8; 3 runs, "
                    "precision 5%)")
    text = table(s)
    assert "goodput" in text and "slo attainment" in text and "30.0%" in text
    html = render_sweep_html([s], ["sim"])
    assert "highest rate sustained: 4" in html and "<th>sustained</th>" in html
    assert html.count("<td>yes</td>") == 2 and html.count("<td>no</td>") == 1
    assert "goodput against rate" in html  # the curve of each figure against the rate
    back = SweepResults.model_validate_json(s.to_json().replace('"schema"', '"schema_"', 1))
    assert back.search == s.search


def test_the_api_plans_a_search_point_by_point_without_a_command_line() -> None:
    """`api.RateSearch`: each value `next_value` asks for planned with its own salt, from how
    the points before it went; the results file with the `Search` and its exit code."""
    from workloadlang import api

    source = api.load("chat-rate")
    wl = api.parse_checked(source)
    options = api.PlanOptions(overrides={"users": "2", "length": "4s", "warm": "1s"}, salt="s")
    spec = ratesearch.spec_of(wl, options.overrides, "rate=2..16", max_runs=3)
    search = api.RateSearch(wl, source, options, spec)
    tried = []
    while (p := search.next_point()) is not None:
        assert p.plan.params["rate"] == p.value and p.plan.params["users"] == 2
        assert p.plan.salt == f"s/rate={p.text}"
        tried.append(p.text)
        search.record(p, point(p.value, 10 if p.value <= 4 else 3))  # sustains up to 4
    assert tried == ["2", "4", "8"]  # doubled while sustained, at most 3 runs
    res = search.results()
    assert res.values == ["2", "4", "8"] and res.salt == "s" and res.exit_code == 0
    assert res.search.highest == 4 and res.search.stopped.startswith("3 runs made")


@pytest.mark.parametrize("text, said", [
    ("users=1..4", "declares no SLOs"), ("nope=1..4", "not a number param"),
    ("users=4..1", "under HIGH"),
])
def test_a_search_is_checked_against_its_workload(text: str, said: str) -> None:
    from workloadlang import api

    wl = api.parse_checked(api.load("chat-rate"))
    if said == "declares no SLOs":
        wl = wl.model_copy(update={"slo": None})
    with pytest.raises(SearchError, match=said):
        ratesearch.spec_of(wl, {}, text)
    with pytest.raises(SearchError, match="also set"):
        ratesearch.spec_of(wl, {"rate": "4"}, "rate=1..4")
