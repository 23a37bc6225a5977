"""Numbers shown by their kind wherever `wl` prints them, as the run's own lines do: a gate's
value and threshold (a lag of 1.259 ms next to 50 ms, not `0.001259` next to `0.05`), a report
item by its `as` format, and no number in exponent form in `wl compare` or a sweep's table."""

from __future__ import annotations

import pytest

from workloadlang import ir
from workloadlang.compare import compare_text, fmt_delta
from workloadlang.console.format import fmt_kind
from workloadlang.console.lines import gate_rows
from workloadlang.headline import fmt_value, headline
from workloadlang.kinds import gate_kind
from workloadlang.parse import parse
from workloadlang.report import sample
from workloadlang.report.tables import gate_cell


@pytest.mark.parametrize("value, kind, shown", [
    (0.001259, "duration", "1.26ms"), (0.05, "duration", "50ms"), (0.0099, "duration", "9.9ms"),
    (2.3456, "duration", "2.35s"), (1234.5, "seconds", "1,234.5s"),
    (0.9, "ratio", "90%"), (0.8996, "ratio", "89.96%"), (2 / 3, "ratio", "66.67%"),
    (12070.5, "number", "12,070"), (12070, "count", "12,070"), (1.75, "number", "1.75"),
    (0.00001234, "number", "0.00001234"), (None, "number", "–"), (True, "bool", "true"),
])
def test_a_value_is_shown_by_its_kind(value, kind, shown):
    assert fmt_kind(value, kind) == shown


def gates_of(text: str) -> list[ir.Gate]:
    return list(parse(f"workload w {{ session s {{ user \"x\"; reply 4 label a }} gates {{ {text} }} }}",
                      "t.wl").gates)


def test_a_gate_knows_the_kind_of_what_it_compares():
    g = gates_of("lag: overall p99(schedule_lag{a}) < 50ms warn\n"
                 "hits: overall fraction(hit{a}) >= 90%\n"
                 "n: overall count(ok{a}) >= 1\n"
                 "size: overall mean(prompt_tokens{a}) / 2 > 10\n"
                 "fast: overall median(ttft{a}) < max(2s, 3 * median(ttft{a}))\n"
                 "ok: overall all(ok{a})")
    assert [gate_kind(x) for x in g] == ["duration", "ratio", "number", "number", "duration",
                                         "bool"]


def lag_results():
    gate = sample.gate("on_time", "pass", 0.001259, 0.05, line=1).model_copy(
        update={"kind": "duration"})
    return sample.results("w", "w.wl", [], gates=[gate], params={})


def test_the_run_the_report_and_compare_show_a_lag_gate_in_milliseconds():
    res = lag_results()
    (row,) = gate_rows(res)
    assert row[3:5] == ["1.26ms", "50ms"]
    cell = gate_cell(res.gates[0])
    assert (cell["value"], cell["threshold"]) == ("1.26ms", "50ms")
    text, _ = compare_text(res, res, "a.json", "b.json")
    assert "pass (1.26ms)" in text and "0.001259" not in text


def test_report_items_and_compare_numbers_are_never_in_exponent_form():
    res = sample.results("w", "w.wl", [], gates=[], params={}, report={
        "tokens_sent": 12070.5, "share": 0.5, "slowest": 0.25, "speed": 1234567.0})
    res = res.model_copy(update={"report_format": {"tokens_sent": "tokens", "share": "percent",
                                                   "slowest": "seconds"}})
    h = headline(res)
    assert [fmt_value(*h[k]) for k in ("tokens_sent", "share", "slowest", "speed")] == [
        "12,070", "50.0%", "0.250s", "1,234,567"]
    assert fmt_delta("number", 12070.5, 24141.0) == ("+12,070", "+100.0%")
    text, _ = compare_text(res, res, "a.json", "b.json")
    assert "e+0" not in text
