"""evaluate: plan-time values, command-line param values, and param resolution (WL401-404, 407)."""

from __future__ import annotations

import pytest

from workloadlang import ir
from workloadlang.evaluate import (
    EvalError,
    ParamValueError,
    evaluate,
    format_value,
    param_flag,
    parse_param_value,
    resolve_params,
)
from workloadlang.parse import parse
from workloadlang.resources import bundled_workloads


def expr(text: str) -> ir.Expr:
    """The expression `text`, parsed as the default of a param."""
    return parse(f"workload w {{ params {{ x: float = {text} }} }}", "t.wl").params[0].default


def ev(text: str, **env) -> object:
    return evaluate(expr(text), env)


@pytest.mark.parametrize("text, value", [
    ("8k", 8000), ("1.5M", 1_500_000), ("1.0", 1.0), ("64Ki", 65536), ("500ms", 0.5),
    ("95%", 0.95), ("2min", 120.0), ("7 // 2", 3), ("7 / 2", 3.5), ("7 % 4", 3), ("-3 + 1", -2),
    ("2 * (3 + 4)", 14), ("ceil(2.1)", 3), ("floor(-2.1)", -3), ("round(2.5)", 3),
    ("round(-2.5)", -3), ("abs(-4)", 4), ("min(3, 1, 2)", 1), ("max([4, 9, 2])", 9),
    ('"a" + "b"', "ab"), ("[1] + [2]", [1, 2]), ("1 < 2 and 2 <= 2", True),
    ("not (1 == 1) or 1 != 2", True), ('"b" > "a"', True), ("true == 1", False),
    ("null == null", True), ("if(1 > 2, 10, 20)", 20), ("{ a = 1, b = null }", {"a": 1}),
    ("[1, [2, 3]]", [1, [2, 3]]),
])
def test_evaluate(text: str, value: object):
    got = ev(text)
    assert got == value and type(got) is type(value)


def test_refs_come_from_the_environment():
    assert ev("$a * 2", a=21) == 42
    assert ev("if($t, $missing, 1)", t=False) == 1  # only the chosen branch is evaluated
    assert ev("false and $missing") is False and ev("true or $missing") is True


@pytest.mark.parametrize("text, message", [
    ("1 / 0", "division by zero"), ("1 // 0", "division by zero"), ("$nope", "unknown reference"),
    ('1 + "a"', "cannot apply `+`"), ('1 < "a"', "cannot compare"), ("-true", "cannot negate"),
    ("not 1", "`not` needs true or false"), ("if(1, 2, 3)", "`if` needs true or false"),
    ("ceil(true)", "`ceil` needs a number"), ("max([])", "empty list"), ("1 and true", "`and`"),
    ("sqrt(4)", "unknown function"), ("ceil(1, 2)", "takes 1 argument"),
])
def test_evaluation_errors_carry_a_span(text: str, message: str):
    with pytest.raises(EvalError) as info:
        ev(text)
    assert message in info.value.message
    assert info.value.span is not None and info.value.span.file == "t.wl"


def test_null_in_arithmetic_is_an_error():
    with pytest.raises(EvalError):
        ev("$max_context - 128", max_context=None)


def param(decl: str) -> ir.Param:
    return parse(f"workload w {{ params {{ {decl} }} }}", "t.wl").params[0]


@pytest.mark.parametrize("decl, text, value", [
    ("x: int", "8k", 8000), ("x: int", " 12 ", 12), ("x: tokens", "1.5k", 1500),
    ("x: int", "-3", -3), ("x: float", "1.75", 1.75), ("x: float", "2", 2.0),
    ("x: duration", "500ms", 0.5), ("x: duration", "2min", 120.0), ("x: duration", "0", 0.0),
    ("x: ratio", "95%", 0.95), ("x: ratio", "0.5", 0.5), ("x: bool", "true", True),
    ("x: bool", "No", False), ("x: string", "a b", "a b"),
    ("x: tokens list", "50k,100k", [50000, 100000]), ("x: tokens list", "", []),
    ("x: ratio list", "10%, 20%", [0.1, 0.2]),
])
def test_parse_param_value(decl: str, text: str, value: object):
    got = parse_param_value(param(decl), text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("decl, text", [
    ("x: int", "1.5"), ("x: tokens", "500ms"), ("x: int", "abc"), ("x: duration", "5"),
    ("x: ratio", "2s"), ("x: bool", "maybe"), ("x: float", "5%"), ("x: int list", "1,x"),
])
def test_parse_param_value_rejects(decl: str, text: str):
    with pytest.raises(ParamValueError) as info:
        parse_param_value(param(decl), text)
    assert "expected" in str(info.value)


def test_param_flag():
    assert param_flag("kv_size") == "--kv-size" and param_flag("n") == "--n"


@pytest.mark.parametrize("ptype, value, text", [
    ("duration", 0.5, "500ms"), ("duration", 2.0, "2s"), ("ratio", 0.95, "95%"),
    ("tokens", 150000, "150000"), ("string", "a", '"a"'), ("bool", True, "true"),
    ("tokens", [1, 2], "1, 2"), ("float", 1500000.0, "1500000"),
])
def test_format_value(ptype: str, value: object, text: str):
    assert format_value(ptype, value) == text


# ---------------------------------------------------------------- resolve_params

def workload(params: str) -> ir.Workload:
    return parse(f"workload w {{ params {{ {params} }} }}", "t.wl")


def resolve(params: str, overrides: dict | None = None, **env):
    values, diags = resolve_params(workload(params), overrides or {}, env)
    return values, [d.code for d in diags], diags


def test_defaults_derived_in_dependency_order():
    values, codes, _ = resolve("total: int = $a * $b   a: int = 2   b: int = $a + 1")
    assert values == {"total": 6, "a": 2, "b": 3} and codes == []
    assert list(values) == ["total", "a", "b"]  # declaration order


def test_overrides_win_and_feed_derived_values():
    values, codes, _ = resolve("a: int = 2  b: int = $a * 10", {"a": "5"})
    assert values == {"a": 5, "b": 50} and codes == []
    values, _, _ = resolve("kv_size: tokens  n: int = $kv_size // 1k", {"--kv-size": "64k"})
    assert values == {"kv_size": 64000, "n": 64}


def test_computed_values_get_the_param_type():
    values, codes, _ = resolve("a: tokens = 10k / 2  r: ratio = 1 / 2  d: duration = 1s * 2")
    assert values == {"a": 5000, "r": 0.5, "d": 2.0} and type(values["a"]) is int
    _, codes, diags = resolve("a: int = 5 / 2")
    assert codes == ["WL404"] and "whole number" in diags[0].message


def test_range_and_choices_wl401():
    _, codes, diags = resolve("n: int = 3 in 1..10", {"n": "11"})
    assert codes == ["WL401"] and diags[0].message == "`n` = 11 is out of its range 1..10"
    assert diags[0].hint == "set --n between 1 and 10"
    _, codes, diags = resolve("l: tokens list = [1k, 5] in 64..")
    assert codes == ["WL401"] and "`l` = 5 " in diags[0].message
    _, codes, diags = resolve('m: string = "a" one of "branch", "b"', {"m": "brnach"})
    assert codes == ["WL401"] and diags[0].hint == 'did you mean "branch"?'
    _, codes, diags = resolve("s: int = $m - 1 in 1..  m: int = 1")
    assert codes == ["WL401"] and "computed from its default" in diags[0].hint
    _, codes, _ = resolve("lo: int = 5  n: int = 3 in $lo..")
    assert codes == ["WL401"]


def test_required_missing_wl402():
    values, codes, diags = resolve("kv_size: tokens in 1..  n: int = $kv_size")
    assert values == {} and codes == ["WL402"]  # `n` fails silently: its input already did
    assert diags[0].message == "missing required parameter `kv_size`"
    assert diags[0].hint == "pass --kv-size N" and diags[0].span.line == 1


def test_unknown_override_wl403():
    _, codes, diags = resolve("kv_size: tokens = 1", {"kv-sise": "3"})
    assert codes == ["WL403"] and diags[0].hint == "did you mean `kv_size` (--kv-size)?"
    _, _, diags = resolve("a: int = 1", {"zzz": "3"})
    assert diags[0].hint == "the parameters are --a"


def test_bad_value_wl404():
    values, codes, diags = resolve("n: int = 3  m: int = $n", {"n": "lots"})
    assert values == {} and codes == ["WL404"]  # no fallback to the default
    assert diags[0].message == ("bad value for --n: expected a whole number like `8` or `8k`, "
                                "got `lots`")
    _, codes, _ = resolve("n: float = 1 / 0")
    assert codes == ["WL404"]


def test_cycles_do_not_hang():
    values, codes, _ = resolve("a: int = $b  b: int = $a  c: int = 1")
    assert values == {"c": 1} and codes == ["WL404"]


def test_max_context_wl407():
    params = "limit: tokens = $max_context in 1..  steps: int = $limit // 1k"
    values, codes, diags = resolve(params, max_context=None)
    assert codes == ["WL407"] and "--max-context" in diags[0].hint and "--limit" in diags[0].hint
    values, codes, _ = resolve(params)  # not even in the environment
    assert codes == ["WL407"]
    values, codes, _ = resolve(params, {"limit": "8k"}, max_context=None)
    assert values == {"limit": 8000, "steps": 8} and codes == []
    values, codes, _ = resolve(params, max_context=32768)
    assert values == {"limit": 32768, "steps": 32} and codes == []


@pytest.mark.parametrize("name", [n for n, _ in bundled_workloads()])
def test_bundled_defaults_resolve(name: str):
    wl = parse(dict(bundled_workloads())[name].read_text(encoding="utf-8"), f"{name}.wl")
    overrides = {"cache-pressure": {"kv_size": "64k"}, "mooncake": {"trace": "t.jsonl"}}.get(
        name, {})
    values, diags = resolve_params(wl, overrides, {"max_context": 131072, "timing_tokens": 0})
    assert diags == [] and set(values) == {p.name for p in wl.params}
