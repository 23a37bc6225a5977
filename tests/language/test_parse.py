"""parse: bundled workloads -> IR (golden JSON), spans, literals, keywords in context, and the
grammar's hygiene.

Golden files: tests/golden/parse/<name>.json; regenerate with WL_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import logging
import os
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from lark import logger as lark_logger

from workloadlang import ir
from workloadlang.check import check
from workloadlang.diagnostics import WorkloadError
from workloadlang.parse import parse, parser
from workloadlang.resources import bundled_workloads, read_grammar
from workloadlang.syntax import _LITERALS

GOLDEN = Path(__file__).parents[1] / "golden" / "parse"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"
BUNDLED = [name for name, _ in bundled_workloads()]


def load_bundled(name: str) -> ir.Workload:
    path = dict(bundled_workloads())[name]
    return parse(path.read_text(encoding="utf-8"), f"workloads/{name}.wl")


def one_param(decl: str) -> ir.Param:
    return parse(f"workload w {{ params {{ {decl} }} }}", "t.wl").params[0]


def test_all_bundled_workloads_are_found():
    assert BUNDLED == ["abort-sim", "agent-sim", "cache-pressure", "chat-rate", "coding-agent",
                       "idle-resume", "mooncake", "needle-test", "perf-sim", "shared-prompt",
                       "tenant-flood"]


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_matches_golden_ir(name: str):
    got = load_bundled(name).model_dump_json(indent=2) + "\n"
    golden = GOLDEN / f"{name}.json"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8"), "run with WL_UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_checks_cleanly(name: str):
    assert check(load_bundled(name)) == []


@pytest.mark.parametrize("name", BUNDLED)
def test_ir_json_round_trip(name: str):
    wl = load_bundled(name)
    assert ir.Workload.model_validate_json(wl.model_dump_json()) == wl


def _nodes(node: object):
    """Every IR node inside `node` (depth first)."""
    if isinstance(node, ir.Node):
        yield node
        for field in type(node).model_fields:
            yield from _nodes(getattr(node, field))
    elif isinstance(node, tuple):
        for item in node:
            yield from _nodes(item)


@pytest.mark.parametrize("name", BUNDLED)
def test_every_node_has_a_span_inside_the_file(name: str):
    wl = load_bundled(name)
    lines = dict(bundled_workloads())[name].read_text(encoding="utf-8").count("\n") + 1
    for node in _nodes(wl):
        if isinstance(node, (ir.Span, ir.Settings)):
            continue  # Settings.span is None when there are no settings
        span = node.span
        assert span.file == f"workloads/{name}.wl"
        assert 1 <= span.line <= span.end_line <= lines, node
        assert span.line < span.end_line or span.col < span.end_col, node


def test_spans_point_at_the_construct():
    text = 'workload w {\n  session main {\n    user filler 5k\n    reply 16 label x\n  }\n}\n'
    reply = parse(text, "t.wl").sessions[0].body[1]
    span = reply.span
    assert (span.line, span.col, span.end_line, span.end_col) == (4, 5, 4, 21)
    assert (reply.max_tokens.span.col, reply.max_tokens.span.end_col) == (11, 13)


@pytest.mark.parametrize("text, value, unit", [
    ("123", 123, "number"), ("1.5", 1.5, "number"), ("8k", 8000, "number"),
    ("1.5M", 1_500_000, "number"), ("64Ki", 65536, "number"), ("2Mi", 2 * 1048576, "number"),
    ("500ms", 0.5, "duration"), ("2s", 2, "duration"), ("3min", 180, "duration"),
    ("95%", 0.95, "ratio"), ("7%", 0.07, "ratio"),
])
def test_number_literals_and_units(text: str, value: float, unit: str):
    num = one_param(f"x: float = {text}").default
    assert (num.value, num.unit, num.text) == (value, unit, text)


def test_range_dots_are_not_a_decimal_point():
    wl = parse("workload w { session s { for i in 0..$n { wait 1s } } }", "t.wl")
    loop = wl.sessions[0].body[0]
    assert (loop.low.value, loop.high.name, loop.over) == (0, "n", None)


def test_open_range_followed_by_the_next_param():
    text = "workload w { params { a: int = 1 in 1..\n b: int = 2 in ..9 c: int in 0..1 } }"
    wl = parse(text, "t.wl")
    a, b, c = wl.params
    assert a.range.low.value == 1 and a.range.high is None
    assert b.range.low is None and b.range.high.value == 9
    assert c.default is None and c.range.high.value == 1


def test_keywords_are_names_where_a_name_is_expected():
    text = """workload w {
      params { a: int = 5 settle: duration = 1s label: int = 2 max_tokens: int = 3 needle: int = 1 }
      options { label = 1 settle = 2 }
      session main { turn needle { reply $max_tokens label session as first } }
      gates { warn: overall count(ok{needle}) > 0 -> error warn }
    }"""
    wl = parse(text, "t.wl")
    assert [p.name for p in wl.params] == ["a", "settle", "label", "max_tokens", "needle"]
    assert [o.key for o in wl.options] == ["label", "settle"]
    reply = wl.sessions[0].body[0].body[0]
    assert (reply.label, reply.name) == ("session", "first")
    gate = wl.gates[0]
    assert (gate.name, gate.verdict, gate.severity) == ("warn", "error", "warn")


def test_a_keyword_the_table_lists_but_cannot_take_is_a_name():
    """After an expression, Lark's LALR table lists every keyword that may follow an expression
    anywhere (`probe` ends a reply's expression); in a params block `probe` can only be the next
    param's name, and is."""
    text = 'workload w { params { a: int = 1\n probe: int = 2 }\n session s { reply $probe } }'
    wl = parse(text, "t.wl")
    assert [p.name for p in wl.params] == ["a", "probe"]
    assert wl.sessions[0].body[0].max_tokens.name == "probe"


def test_a_syntax_error_after_a_keyword_read_as_a_name_is_reported_there():
    """The word is typed by what the parser can take after the reductions it implies, so the
    error is the name's missing `:`, not the keyword."""
    text = "workload w { params { c: int = $a probe d: int = 1 } }"
    with pytest.raises(WorkloadError) as info:
        parse(text, "t.wl")
    (diag,) = info.value.diagnostics
    assert diag.message == "unexpected name `d`; expected `:`"
    assert (diag.span.line, diag.span.col) == (1, 41)


def test_if_call_and_if_statement():
    text = """workload w { params { t: bool = false } session s {
      if not($t) { user "a" } else if $t { user "b" } else { user "c" }
      reply if($t, 1, 2) } }"""
    stmt, reply = parse(text, "t.wl").sessions[0].body
    assert isinstance(stmt.cond, ir.Not) and isinstance(stmt.orelse[0], ir.If)
    assert stmt.orelse[0].orelse[0].parts[0].value == "c"
    assert reply.max_tokens.func == "if" and len(reply.max_tokens.args) == 3
    stmt = parse('workload w { session s { if($t) { user "a" } } }', "t.wl").sessions[0].body[0]
    assert isinstance(stmt, ir.If) and stmt.cond.name == "t"  # `if(` is a call only in expressions


def test_separators_and_objects():
    text = 'workload w { options { a = 1, b = "x"; c = { d = [1, 2,], "e-f" = null } g = [] } ; ; }'
    a, b, c, g = parse(text, "t.wl").options
    assert [o.key for o in c.value.items] == ["d", "e-f"]
    assert len(c.value.items[0].value.items) == 2 and g.value.items == ()


def test_string_escapes():
    wl = parse(r'workload w { session s { user "a\n\t\"b\\" } }', "t.wl")
    part = wl.sessions[0].body[0].parts[0]
    assert part.value == 'a\n\t"b\\'


def test_statement_clauses_in_any_order():
    text = """workload w { session s {
      reply 5 label l as n synthetic abort after 3 options { seed = 1 } expect reply contains needle
        expect reply contains "ok"
      probe label p
      resend n[0] label r max_tokens 1
      spawn 2 label x as i fork { wait 1s }
      for v in reverse [1, 2] label f until error { wait 1s }
      grow until 10k by 1k as g label q { wait 1s }
    } }"""
    reply, probe, resend, spawn, loop, grow = parse(text, "t.wl").sessions[0].body
    assert (reply.mode, reply.name, reply.label) == ("synthetic", "n", "l")
    assert reply.abort_after.value == 3
    assert [e.what for e in reply.expect] == ["needle", "text"] and reply.options[0].key == "seed"
    assert probe.max_tokens is None and probe.label == "p"
    assert (resend.name, resend.index.value, resend.label) == ("n", 0, "r")
    assert (spawn.mode, spawn.var, spawn.label) == ("fork", "i", "x")
    assert loop.reverse and loop.over.kind == "listexpr" and loop.until == "error"
    assert (grow.var, grow.label) == ("g", "q")


def test_gate_expressions_lower_metric_free_parts_to_gnum():
    text = """workload w { session s { turn t { reply 1 } }
      gates { g: each session ttft{t, last 3} < $r * 2 * median(ttft{t}) + (1 + 2) warn } }"""
    gate = parse(text, "t.wl").gates[0]
    assert gate.scope == "each_session" and gate.severity == "warn"
    assert gate.left.selector[1].key == "last" and gate.left.selector[1].count.value == 3
    plus = gate.right
    assert isinstance(plus, ir.GBin) and plus.op == "+"
    assert isinstance(plus.right, ir.GNum) and plus.right.value.op == "+"
    times = plus.left
    assert isinstance(times.left, ir.GNum) and times.left.value.op == "*"
    assert isinstance(times.right, ir.Agg)


def test_selector_items():
    text = """workload w { session s { turn t { reply 1 } }
      report {
        r: count(ok{t, warm, label=t, phase=p, session=s, first 2}) as percent by label
      } }"""
    item = parse(text, "t.wl").report[0]
    keys = [(i.key, i.value) for i in item.value.arg.selector]
    assert keys == [("name", "t"), ("flag", "warm"), ("label", "t"), ("phase", "p"),
                    ("session", "s"), ("first", "")]
    assert (item.fmt, item.by) == ("percent", "label")


def test_syntax_error_is_a_workload_error_with_one_diagnostic():
    with pytest.raises(WorkloadError) as info:
        parse("workload w { sesion main { } }", "t.wl")
    (diag,) = info.value.diagnostics
    assert diag.code == "WL101" and diag.hint == "did you mean `session`?"
    assert (diag.span.line, diag.span.col, diag.span.end_col) == (1, 14, 20)


def test_parser_is_built_once():
    assert parser() is parser()


def test_lark_is_pinned_below_its_next_major_version():
    """pyproject bounds Lark to the versions whose interactive parser syntax.py is written for,
    and the Lark installed is one of them (a new major version is read before it is taken)."""
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    (spec,) = re.findall(r'"lark([^"]*)"', pyproject)
    assert spec == ">=1.2.1,<2"
    installed = tuple(int(p) for p in version("lark").split(".")[:2])
    assert (1, 2) <= installed < (2, 0), version("lark")


def test_grammar_terminals_all_have_readable_names():
    for terminal in parser().terminals:
        assert not terminal.name.startswith("__"), terminal
        if terminal.pattern.type == "re" and terminal.name not in ("COMMENT", "WHITESPACE"):
            assert terminal.name in _LITERALS, f"{terminal.name} needs a human description"


def lalr_warnings(grammar: str, caplog: pytest.LogCaptureFixture) -> str:
    """What Lark logs while building LALR tables in debug mode (it resolves conflicts silently
    otherwise)."""
    from lark import Lark

    level = lark_logger.level
    try:
        with caplog.at_level(logging.DEBUG, logger="lark"):
            Lark(grammar, parser="lalr", debug=True)
    finally:
        lark_logger.setLevel(level)
    return caplog.text


def test_conflicts_would_be_noticed(caplog: pytest.LogCaptureFixture):
    assert "conflict" in lalr_warnings('start: a | a "x"\na: "y" ["x"]\n', caplog).lower()


def test_grammar_has_no_lalr_conflicts(caplog: pytest.LogCaptureFixture):
    assert "conflict" not in lalr_warnings(read_grammar(), caplog).lower()
