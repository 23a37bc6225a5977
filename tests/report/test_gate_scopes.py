"""An `each session` gate judges the sessions its selectors can read: a session none of whose
requests it can pick is not judged by it (not `unknown`, not `unverified`), `session=NAME`
narrows it to NAME's copies, and `wl check` warns (WL218) of a session left out without
`session=` saying so. Run on the embedded simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkhelp import check_codes
from runhelp import gate
from runhelp import wl_run_text as wl_run
from workloadlang import api
from workloadlang.diagnostics import WorkloadError
from workloadlang.plan.model import Plan


def plan_of(text: str) -> Plan:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, {}, salt="scopes")


TWO = """workload two {
  session victim repeat 2 {
    user filler 500; reply 8
    turn back { user filler 100; reply 8 }
  }
  session tenant repeat 3 { user filler 300; reply 8 label one_shot }
  gates {
    kept: each session reuse{back} >= 90% -> evicted
    named: each session all(ok{session=tenant})
  }
}"""


def test_each_session_gates_judge_only_the_sessions_they_read(tmp_path: Path):
    plan = plan_of(TWO)
    reads = {g.gate.name: g.reads for g in plan.gates}
    assert reads == {"kept": {"victim#0": 1, "victim#1": 1},
                     "named": {"tenant#0": 1, "tenant#1": 1, "tenant#2": 1}}
    code, res = wl_run(tmp_path, TWO, "--sim")
    assert code == 0, res["gates"]
    assert [r["scope"] for r in gate(res, "kept")["results"]] == ["victim#0", "victim#1"]
    assert {r["status"] for g in res["gates"] for r in g["results"]} == {"pass"}
    assert res["verdicts"] == {"victim#0": "ok", "victim#1": "ok", "tenant#0": "ok",
                               "tenant#1": "ok", "tenant#2": "ok"}


def test_check_warns_of_a_session_a_gate_cannot_read():
    found = check_codes(TWO)
    assert found == [("WL218", "gate `kept` can read nothing of session `tenant`, so it judges "
                      "only `victim`")]
    narrowed = TWO.replace("reuse{back}", "reuse{back, session=victim}")
    assert check_codes(narrowed) == []


def test_a_gate_reading_nothing_anywhere_is_still_an_error():
    with pytest.raises(WorkloadError) as exc:
        plan_of(TWO.replace("reuse{back}", "reuse{back, probe}"))
    errs = exc.value.diagnostics
    assert [d.code for d in errs] == ["WL405"] and "in any session" in errs[0].message
