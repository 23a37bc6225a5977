"""check: one small workload per rule -> the codes it must (and must not) produce; rendering."""

from __future__ import annotations

import json

import pytest

from workloadlang import ir
from workloadlang.check import arith_kind, check, comparable
from workloadlang.diagnostics import (
    Diagnostic,
    WorkloadError,
    error,
    render_json,
    render_text,
    sort_diagnostics,
)
from workloadlang.parse import parse

FLOW = {"WL236", "WL410"}
"""What a session's statements do in order (a trailing `wait`, no request at all): the small
bodies here have them, tests/language/test_check_flow.py tests them."""


def codes(body: str, params: str = "") -> list[str]:
    """The diagnostic codes of a workload with `params { params }` and then `body` (but
    `FLOW`'s)."""
    text = f"workload w {{ params {{ {params} }} {body} }}"
    try:
        return [d.code for d in check(parse(text, "t.wl")) if d.code not in FLOW]
    except WorkloadError as exc:
        return [d.code for d in exc.diagnostics]


SESSION = "session main { turn t { user filler 10; reply 1 } }"


@pytest.mark.parametrize("params, body, expected", [
    # names
    ("n: int = 1", "session s { reply $m }", ["WL201", "WL213"]),
    ("n: int = 1", "session s { reply $nn }", ["WL201"]),  # the close match counts as used
    ("", "session s { for i in 0..2 { wait 1s }; reply $i }", ["WL201"]),
    ("n: int = 1; n: int = 2", "session s { reply $n }", ["WL202"]),
    ("", "options { a = 1 b = 2 a = 3 } session s { reply 1 }", ["WL202"]),
    ("", "session s { reply 1 options { a = { b = 1, b = 2 } } }", ["WL202"]),
    ("", f"{SESSION} gates {{ g: overall tft{{t}} < 1s }}", ["WL203"]),
    ("", f"{SESSION} gates {{ g: overall avg(ttft{{t}}) < 1s }}", ["WL204"]),
    ("", "session s { reply sqrt(4) }", ["WL205"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{nope}} < 1s }}", ["WL206"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{label=main}} < 1s }}", ["WL206"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{t, warm, hit, session=main}} < 1s }}", []),
    ("", f"{SESSION} gates {{ g: overall ttft{{main}} < 1s }}", ["WL206"]),  # needs session=
    ("", f"{SESSION} gates {{ g: overall ttft{{t}} < max(1s, 2 * median(ttft{{t}})) }}", []),
    ("", f"{SESSION} gates {{ g: overall ttft{{t}} < max(1, median(ttft{{t}})) }}", ["WL301"]),
    ("", "session s { resend nope }", ["WL207"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{t}} < $hit_ttft }}", ["WL208"]),
    ("", f"calibrate ttft_threshold {SESSION} gates {{ g: overall ttft{{t}} < $hit_ttft }}", []),
    ("", f"calibrate chars_per_token {SESSION} report {{ r: $chars_per_token }}", []),
    ("x: int = $chars_per_token", "session s { reply $x }", ["WL209"]),
    ("a: int = $a", "session s { reply $a }", ["WL210"]),
    ("n: int = 1", "session s { repeat 2 as n { reply $n } }", ["WL211"]),
    ("", "session s { repeat 2 as i { repeat 2 as i { reply $i } } }", ["WL211"]),
    ("cold_ttft: float = 1", "session s { reply 1 }", ["WL212", "WL213"]),
    ("", "session s { phase a { turn t { phase b { reply 1 } } } }", ["WL214"]),
    ("", "session s { phase a { reply 1 } phase b { reply 1 } }", []),
    # types and units
    ("x: tokens = 500ms", "session s { reply $x }", ["WL301"]),
    ("x: duration = 5", "session s { wait $x }", ["WL301"]),
    ("x: duration = 0", "session s { wait $x }", []),  # zero is zero in any unit
    ("x: duration = 1s in 0..", "session s { wait $x }", []),
    ("x: duration = 1s in 1..", "session s { wait $x }", ["WL301"]),
    ("x: ratio = 0.5 in 0..1", "session s { user filler 1k needle at $x; reply 1 }", []),
    ("", f"settle = 8k {SESSION}", ["WL301"]),
    ("", f"settle = 2s timeout = 1min concurrency = 4 fail_fast = true hit_ratio = 50% {SESSION}",
     []),
    ("", f"fail_fast = 1 {SESSION}", ["WL302"]),
    ("", "session s { wait 1s + 50% }", ["WL301"]),
    ("", "session s { wait 2s * 50% }", []),
    ("", "session s { wait 10s / 4 }", []),
    ("", "session s { reply 10s / 2s }", []),
    ("", "session s { reply 2 / 1s }", ["WL301"]),
    ("", 'session s { if 1 { wait 1s } }', ["WL302"]),
    ("", 'session s { if "a" == 1 { wait 1s } }', ["WL301"]),
    ("", 'session s { if 1s < 0 { wait 1s } }', []),
    ("", 'session s { if 1s < 5 { wait 1s } }', ["WL301"]),
    ("", 'session s { if not 1 { wait 1s } }', ["WL302"]),
    ("", 'session s { reply -"a" }', ["WL302"]),
    ("l: int list = [1, 2]", "session s { for x in $l { reply $x } }", []),
    ("l: int list = [1, 2s]", "session s { for x in $l { reply $x } }", ["WL301"]),
    ("l: int list = 3", "session s { for x in $l { reply $x } }", ["WL302"]),
    ("n: int = 3", "session s { for x in $n { reply $x } }", ["WL302"]),
    ("l: tokens list = [1k, 2k]", "session s { reply max($l) + min(1, 2) }", []),
    ("n: int = 2.5", "session s { reply $n }", ["WL303"]),
    ("n: tokens = 2.5k", "session s { reply $n }", []),
    ('m: string = "x" one of "a", "b"', 'session s { if $m == "a" { wait 1s } }', ["WL304"]),
    ('m: int = 1 one of "a"', "session s { reply $m }", ["WL304"]),
    ("n: int = 0 in 1..", "session s { reply $n }", ["WL305"]),
    ("n: int = 5 in 9..1", "session s { reply $n }", ["WL305", "WL305"]),
    ("", "session s { reply abs(1, 2) }", ["WL306"]),
    ("", f"{SESSION} gates {{ g: overall mean(ttft{{t}}) }}", ["WL307"]),
    ("", f"{SESSION} gates {{ g: overall any(hit{{t}}) }}", []),
    ("", f"{SESSION} gates {{ g: overall fraction(ttft{{t}}) > 50% }}", ["WL307"]),
    ("", f"{SESSION} gates {{ g: overall median(ttft{{t}} + 1s) < 2s }}", ["WL308"]),
    ("", f"{SESSION} gates {{ g: overall reuse{{t}} >= 90% }}", []),
    ("", f"{SESSION} gates {{ g: overall reuse{{t}} >= 1s }}", ["WL301"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{t}} < 2 * median(ttft{{t, last 3}}) }}", []),
    ("", f"{SESSION} gates {{ g: overall ttft{{t}} < median(ttft{{t}}) * median(ttft{{t}}) }}",
     ["WL301"]),
    ("", f"{SESSION} report {{ r: count(ok{{t}}) / 2 as percent }}", []),
    ("", f"{SESSION} gates {{ g: overall ttft{{t, last 1s}} < 1s }}", ["WL301"]),
    # the built-in environment ref
    ("c: tokens = $max_context", "session s { reply $c }", []),
])
def test_codes(params: str, body: str, expected: list[str]):
    assert sorted(codes(body, params)) == sorted(expected)


@pytest.mark.parametrize("params, body, expected", [
    ("", 'session s { user "x"; reply -3 }', ["WL305"]),
    ("", "session s { user filler -500; reply 4 }", ["WL305"]),
    ("", "session s { repeat -2 { reply 1 } }", ["WL305"]),
    ("n: tokens = -2k", "session s { user filler $n; reply 4 }", ["WL305"]),
    ("d: duration = -1s", "session s { reply 1; wait $d }", ["WL305"]),
    ("", "session s { reply 1; wait -1s }", ["WL305"]),
    ("", f"concurrency = 0 {SESSION}", ["WL305"]),
    ("", f"concurrency = -1 {SESSION}", ["WL305"]),
    ("", f"settle = -5s {SESSION}", ["WL305"]),
    ("", f"timeout = 0s {SESSION}", ["WL305"]),
    ("", f"hit_ratio = 200% {SESSION}", ["WL305"]),
    ("", f"hit_ratio = 0% {SESSION}", ["WL305"]),
    ("", f"max_context = 0 {SESSION}", ["WL305"]),
    ("", "session s { user filler 0.5; reply 1 }", ["WL303"]),
    ("", "session s { repeat 2.5 { reply 1 } }", ["WL303"]),
    ("", "session s { repeat 5 / 2 { reply 1 } }", ["WL303"]),  # a computed constant too
    ("", "session s { spawn 1.5 { reply 1 } }", ["WL303"]),
    ("", f"concurrency = 1.5 {SESSION}", ["WL303"]),
    ("", "session s { reply 0 }", ["WL305"]),
    ("", "session s { probe 0 }", ["WL305"]),
    ("", "session s { reply 2 as a; resend a max_tokens 0 }", ["WL305"]),
    ("", "session s { reply 4 abort after -1 }", ["WL305"]),
    ("", "session s { grow until 1k by 0 { reply 1 } }", ["WL305"]),
    ("", "session s { for i in 0..-3 { reply 1 } }", ["WL305"]),
    ("", "session s repeat -1 { reply 1 }", ["WL305"]),
    ("", "session s { user filler 1k needle at 150%; reply 1 }", ["WL305"]),
    ("", f"calibrate ttft_threshold tokens 0 repeat 2 {SESSION}", ["WL305"]),
    ("", f"{SESSION} gates {{ g: overall ttft{{t, last 0}} < 1s }}", ["WL305"]),
    ("", "", ["WL216"]),
    ("", "doc \"nothing\"", ["WL216"]),
    # the edges that are fine
    ("", "session s { repeat 0 { reply 1 } reply 1 abort after 0; wait 0s }", []),
    ("", "session s { user filler 0; reply 1 }", []),
    ("", f"hit_ratio = 100% timeout = 1ms concurrency = 1 {SESSION}", []),
    ("n: int = -2", "session s { reply 1 + $n * 0 }", []),  # an int may be negative
])
def test_constants_are_range_checked(params: str, body: str, expected: list[str]):
    assert sorted(codes(body, params)) == sorted(expected)


def test_a_range_message_names_the_place_the_bound_and_the_value():
    text = 'workload w {\n concurrency = 0\n session s { user "x"; reply 0; wait -1s } }'
    diags = [d for d in check(parse(text, "t.wl")) if d.code not in FLOW]
    assert [d.message for d in diags] == [
        "`concurrency` must be at least 1, not `0`",
        "the `max_tokens` of `reply` must be at least 1, not `0`",
        "`wait` must be at least 0s, not `-1s`"]
    assert "probe" in diags[1].hint  # reply 0 is explained: what to write instead


def test_unused_param_is_only_a_warning():
    diags = check(parse(f"workload w {{ params {{ n: int = 1 }} {SESSION} }}", "t.wl"))
    assert [(d.code, d.severity) for d in diags] == [("WL213", "warning")]


def test_check_collects_everything_in_source_order():
    text = "workload w {\n session s { reply $a }\n session s { reply $b }\n}"
    diags = check(parse(text, "t.wl"))
    assert [(d.code, d.span.line) for d in diags] == [("WL201", 2), ("WL202", 3), ("WL201", 3)]


@pytest.mark.parametrize("op, left, right, result", [
    ("+", "number", "ratio", "ratio"), ("-", "duration", "duration", "duration"),
    ("+", "duration", "number", None), ("*", "ratio", "duration", "duration"),
    ("*", "duration", "duration", None), ("/", "duration", "duration", "number"),
    ("/", "number", "duration", None), ("//", "ratio", "ratio", "number"),
    ("%", "duration", "duration", "duration"), ("+", "string", "string", "string"),
    ("-", "string", "string", None), ("*", "any", "bool", "any"),
])
def test_unit_rules(op: str, left: str, right: str, result: str | None):
    assert arith_kind(op, left, right) == result


def test_comparisons():
    assert comparable("<", "number", "ratio")
    assert comparable("==", "string", "null")
    assert not comparable("<", "bool", "bool")
    assert not comparable("<", "duration", "number")


# ---------------------------------------------------------------- rendering

SPAN = ir.Span(file="f.wl", line=2, col=5, end_line=2, end_col=8)


def test_render_text_shape():
    d = error("WL201", "unknown parameter `$x`", SPAN, "did you mean `$y`?")
    text = render_text([d], {"f.wl": "line one\n    foo bar\n"})
    assert text == ("f.wl:2:5: error[WL201]: unknown parameter `$x`\n"
                    "    2 |     foo bar\n"
                    "      |     ^^^\n"
                    "   = help: did you mean `$y`?")


def test_render_text_keeps_tabs_so_carets_line_up():
    d = error("WL101", "m", SPAN)
    text = render_text([d], {"f.wl": "x\n\t\t  foo\n"})
    assert text.splitlines()[2] == "      | \t\t  ^^^"


def test_render_text_without_span_or_source_and_multiline_span():
    no_span = Diagnostic(code="WL403", message="unknown parameter `x`", hint="h")
    assert render_text([no_span], {}) == "error[WL403]: unknown parameter `x`\n   = help: h"
    multi = error("WL202", "m", SPAN.model_copy(update={"end_line": 3, "end_col": 2}))
    assert render_text([multi], {"f.wl": "a\n    foo bar\nz"}).splitlines()[2].endswith("^^^^^^^")
    assert render_text([multi], {}) == "f.wl:2:5: error[WL202]: m"


def test_render_json_round_trips():
    diags = [error("WL201", "m", SPAN, "h"), Diagnostic(code="WL403", message="x")]
    data = json.loads(render_json(diags))
    assert data[0] == {"code": "WL201", "severity": "error", "message": "m", "hint": "h",
                       "span": {"file": "f.wl", "line": 2, "col": 5, "end_line": 2, "end_col": 8}}
    assert [Diagnostic.model_validate(d) for d in data] == diags


def test_sort_puts_spanless_last():
    later = error("WL201", "b", SPAN.model_copy(update={"line": 9, "end_line": 9}))
    spanless = Diagnostic(code="WL403", message="c")
    assert sort_diagnostics([spanless, later, error("WL201", "a", SPAN)])[1] is later
    assert sort_diagnostics([spanless, later])[-1] is spanless


def test_workload_error_carries_its_diagnostics():
    exc = WorkloadError([error("WL101", "boom", SPAN)])
    assert str(exc) == "boom" and exc.diagnostics[0].code == "WL101"


def test_checked_metrics_are_the_metrics_gates_can_read():
    from workloadlang.check import METRICS
    from workloadlang.gates import METRICS as READABLE

    assert set(METRICS) == set(READABLE)
