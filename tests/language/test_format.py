"""Values formatted into text: `{$name}` in a string literal and `str(x)`.

Input: small workloads. Output checked: the planned texts (numbers without a fraction, strings
as they are, loop variables per iteration), tool call arguments, the diagnostics with a caret
under the name, and that a string without `{$` is left as it is.
"""

from __future__ import annotations

import pytest

from workloadlang import api
from workloadlang.diagnostics import WorkloadError
from workloadlang.evaluate import text_of


def plan(text: str, **params: str):
    source = api.Source(name="f.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt="f")


def texts(p) -> list[str]:
    return ["".join(s.text for s in m.segs if s.kind == "text") for m in p.messages
            if m.role != "assistant"]


AGENTS = """workload agents {
  params { n: int = 2; who: string = "lead"; pause: duration = 1500ms; share: ratio = 25% }
  session main {
    system "You are the {$who} agent with {$n} helpers ({$pause}s, {$share})."
    spawn $n cold as i label sub {
      user "You are sub-agent {$i} of {$n}: look at part {$i}."
      reply 8 call read_file { path = "src/mod{$i}.py" }
    }
    user "Report " + str($n * 2) + " findings."
    reply 4
  }
}
"""


def test_values_and_loop_variables_are_formatted_into_texts():
    p = plan(AGENTS, n="3")
    assert texts(p) == [
        "You are the lead agent with 3 helpers (1.5s, 0.25).",
        "You are sub-agent 0 of 3: look at part 0.",
        "You are sub-agent 1 of 3: look at part 1.",
        "You are sub-agent 2 of 3: look at part 2.",
        "Report 6 findings.",
    ]
    calls = [s for m in p.messages for s in m.segs if s.kind == "call"]
    assert [dict(c.args)["path"].text for c in calls] == [f"src/mod{i}.py" for i in range(3)]


def test_a_string_without_a_reference_is_left_as_it_is():
    p = plan('workload w { session s { user "{x} {$ } {{$}} $x {"; reply 1 } }')
    assert texts(p) == ["{x} {$ } {{$}} $x {"]


def test_an_unknown_name_is_an_error_under_the_name():
    with pytest.raises(WorkloadError) as e:
        plan('workload w {\n  session s {\n    user "a {$nope} b"\n    reply 1\n  }\n}')
    d = e.value.diagnostics[0]
    assert d.code == "WL201" and "nope" in d.message
    assert (d.span.line, d.span.col, d.span.end_col) == (3, 14, 19)


@pytest.mark.parametrize("value, text", [
    (2, "2"), (2.0, "2"), (0.25, "0.25"), (1 / 3, "0.333333333333"), (True, "true"),
    (None, "null"), ("x", "x"), ([1, 2.5], "1, 2.5"),
])
def test_text_of(value, text):
    assert text_of(value) == text
