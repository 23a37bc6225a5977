"""Values known only at plan time are range-checked like constants are by `check`: a param that
makes `concurrency` 0, a `wait` negative, `max_tokens` 0, or the plan empty is a WL401 / WL410
diagnostic with a location, never a plan that silently changes what is measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from workloadlang import api
from workloadlang.diagnostics import Diagnostic, WorkloadError


def errors(text: str, params: Mapping[str, Any] | None = None) -> list[Diagnostic]:
    source = api.Source(name="t.wl", text=text)
    wl = api.parse_checked(source)
    with pytest.raises(WorkloadError) as exc:
        api.make_plan(wl, source, {k: str(v) for k, v in (params or {}).items()}, salt="s")
    return exc.value.diagnostics


SETTINGS = """
workload w {
  params { c: int = 2; t: duration = 1s; h: ratio = 90%; m: int = 100k }
  concurrency = $c
  timeout = $t
  hit_ratio = $h
  max_context = $m
  session s { user "x"; reply 4 }
}
"""


@pytest.mark.parametrize(("param", "value", "message"), [
    ("c", "0", "`concurrency` must be at least 1, but it is 0 here"),
    ("c", "-1", "`concurrency` must be at least 1, but it is -1 here"),
    ("t", "0s", "`timeout` must be above 0s, but it is 0s here"),
    ("h", "200%", "`hit_ratio` must be at most 100%, but it is 200% here"),
    ("m", "0", "`max_context` must be at least 1, but it is 0 here"),
])
def test_settings_from_params_are_range_checked(param: str, value: str, message: str):
    diags = errors(SETTINGS, {param: value})
    assert [(d.code, d.message) for d in diags] == [("WL401", message)]
    assert diags[0].span is not None and diags[0].span.line > 2  # the setting's line


def test_settings_in_range_plan():
    source = api.Source(name="t.wl", text=SETTINGS)
    plan = api.make_plan(api.parse_checked(source), source, {"c": "3"}, salt="s")
    assert plan.concurrency == 3 and plan.timeout_s == 1.0


def test_a_computed_negative_wait_is_refused():
    text = 'workload w { params { a: duration = 1s } session s { reply 1; wait $a - 5s; reply 1 } }'
    diags = errors(text)
    assert [(d.code, d.message) for d in diags] == [
        ("WL401", "`wait` must be at least 0s, but it is -4s here")]


def test_a_computed_zero_max_tokens_is_refused():
    text = "workload w { params { n: int = 0 } session s { reply $n; probe $n } }"
    assert [d.code for d in errors(text)] == ["WL401", "WL401"]


@pytest.mark.parametrize("params", [{"n": 0}, {"k": 0}])
def test_a_plan_without_requests_is_an_error(params: dict[str, int]):
    text = ("workload w { params { n: int = 2; k: int = 1 }\n"
            "  session s repeat $n { repeat $k { user \"x\"; reply 1 } } }")
    diags = errors(text, params)
    assert [d.code for d in diags] == ["WL410"]
    assert diags[0].span.line == 2 and "no request" in diags[0].message


def test_a_negative_tokens_or_duration_param_is_refused():
    text = ("workload w { params { n: tokens = 5; d: duration = 1s }\n"
            "  session s { user filler $n; reply 1; wait $d } }")
    for param, value in (("n", "-2k"), ("d", "-1s")):
        diags = errors(text, {param: value})
        assert [d.code for d in diags] == ["WL401"] and "negative" in diags[0].message
