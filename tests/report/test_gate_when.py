"""A gate's condition (`when`): false in a scope, the gate does not apply there (pass, counted
as `not_applicable`, its detail says why); true, the gate is judged as without it; unknown (a
value not reported, a range across the threshold), the gate passes only when it passes either
way, else it is unknown. Checked like the gate's own test, planned like it (WL405, reads)."""

from __future__ import annotations

import pytest

from workloadlang.api import Source, make_plan, parse_checked
from workloadlang.check import check
from workloadlang.console.lines import gate_rows, session_rows
from workloadlang.diagnostics import WorkloadError
from workloadlang.gates import evaluate_gates
from workloadlang.parse import parse
from workloadlang.plan.dryrun import gates_block
from workloadlang.results import Record
from workloadlang.run.record import base_record
from workloadlang.verdicts import session_verdicts

WL = """
workload w {
  session s repeat 3 {
    user "context"; reply 8 label fin
  }
  gates {
    restore: each session prefill_time{fin} < 100ms when cached_tokens{fin} >= 10% * prompt_tokens{fin} -> degraded
    quick: overall max(ttft{fin}) < 100ms when all(hit{fin}) warn
  }
}
"""


def plan(text: str = WL):
    source = Source(name="w.wl", text=text)
    return make_plan(parse_checked(source), source, {}, salt="t")


def recs(p, fin: list[dict]) -> list[Record]:
    """One record per planned request (the finalize of session i gets `fin[i]`): 1,000 prompt
    tokens, the engine's own prefill time, a TTFT stamped as late as `ttft_late_s` says."""
    out = []
    for i, req in enumerate(p.requests):
        f = {"cached": 900, "prefill": 0.05, "late": None, "hit": True, **fin[i]}
        t = f["prefill"]
        out.append(Record(**base_record(req), prompt_tokens=1000, cached_tokens=f["cached"],
                          uncached_tokens=None if f["cached"] is None else 1000 - f["cached"],
                          ttft_s=t, ttft_late_s=f["late"], e2e_s=t + 0.01, prefill_s=t,
                          prefill_source="client_ttft", hit=f["hit"]))
    return out


def judged(fin: list[dict]):
    p = plan()
    gates = {g.name: g for g in evaluate_gates(p, recs(p, fin), {})}
    return p, gates


def by_scope(g) -> dict:
    return {r.scope: r for r in g.results}


def test_false_does_not_apply_true_is_judged() -> None:
    p, gates = judged([{"cached": 0, "prefill": 0.5}, {"prefill": 0.5}, {"prefill": 0.05}])
    restore = by_scope(gates["restore"])
    # s#0 claims nothing cached: slow, but nothing to judge
    na = restore["s#0"]
    assert (na.status, na.not_applicable, na.value, na.threshold) == ("pass", 1, None, None)
    assert na.detail == ("does not apply: `cached_tokens{fin} >= 10% * prompt_tokens{fin}` is "
                         "false: 0 vs 100")
    # s#1 claims 90 % and is as slow: judged, and fails
    assert (restore["s#1"].status, restore["s#1"].not_applicable) == ("fail", 0)
    assert (restore["s#2"].status, restore["s#2"].not_applicable) == ("pass", 0)
    g = gates["restore"]
    assert (g.status, g.not_applicable) == ("fail", 1)
    # the condition's values count with the gate's: 2 read where it applies, 2 where not
    assert (na.exact, restore["s#1"].exact) == (2, 3)
    assert session_verdicts(p, list(gates.values())) == {
        "s#0": "ok", "s#1": "degraded", "s#2": "ok"}


def test_without_the_condition_the_same_records_fail() -> None:
    """The control: the condition is what keeps s#0 from `degraded`."""
    p = plan(WL.replace(" when cached_tokens{fin} >= 10% * prompt_tokens{fin}", ""))
    gates = evaluate_gates(p, recs(p, [{"cached": 0, "prefill": 0.5}, {}, {}]), {})
    assert session_verdicts(p, gates)["s#0"] == "degraded"


def test_an_unreported_condition_is_unknown_unless_the_gate_passes_either_way() -> None:
    _, gates = judged([{"cached": None, "prefill": 0.5}, {"cached": None, "prefill": 0.05},
                       {}])
    restore = by_scope(gates["restore"])
    assert restore["s#0"].status == "unknown" and restore["s#0"].not_applicable == 0
    assert "whether it applies is not known" in restore["s#0"].detail
    assert "fail if it does" in restore["s#0"].detail
    assert (restore["s#0"].unknown, restore["s#0"].unknown_ids) == (1, ["s#0/fin/0"])
    # fast enough: it passes whether it applies or not, and says the condition was unknown
    assert restore["s#1"].status == "pass"
    assert "it passes either way" in restore["s#1"].detail
    assert gates["restore"].status == "unknown"


def test_an_unknown_yes_no_condition_and_a_range_in_the_gate() -> None:
    """`quick` applies when every finalize is a hit: a hit not known leaves it unknown (slow)
    or passing (fast either way); a miss, not applicable; a hit, judged, over the range of a
    late stamp (0.3 s, maybe 0.02 s) like any gate."""
    hit_unknown = {"hit": None, "prefill": 0.3}
    _, gates = judged([hit_unknown, {}, {}])
    q = gates["quick"].results[0]
    assert q.status == "unknown" and "whether it applies is not known" in q.detail
    assert q.detail.endswith("; fail if it does")
    # fast enough, it passes whether every finalize was a hit or not
    _, gates = judged([{"hit": None}, {}, {}])
    assert gates["quick"].status == "pass"
    # known false (a miss): does not apply, however slow
    _, gates = judged([{"hit": False, "prefill": 0.3}, {}, {}])
    q = gates["quick"].results[0]
    assert (q.status, q.not_applicable) == ("pass", 1)
    # known true, the value a range across 100 ms: unknown like any gate over ranges
    _, gates = judged([{"prefill": 0.3, "late": 0.28}, {}, {}])
    q = gates["quick"].results[0]
    assert (q.status, q.not_applicable, q.ranges) == ("unknown", 0, 1)


def test_a_range_in_the_condition_itself() -> None:
    """The condition over a TTFT range: below the threshold at every end (false, does not
    apply), across it (unknown), above it at every end (true, judged)."""
    text = WL.replace("when cached_tokens{fin} >= 10% * prompt_tokens{fin}",
                      "when max(ttft{fin}) >= 200ms")
    p = plan(text)

    def restore(fin: dict):
        return evaluate_gates(p, recs(p, [fin, {}, {}]), {})[0].results[0]

    below = restore({"prefill": 0.15, "late": 0.1})  # 0.05..0.15 s: never >= 200 ms
    assert (below.status, below.not_applicable) == ("pass", 1)
    across = restore({"prefill": 0.3, "late": 0.2})  # 0.1..0.3 s: not known
    assert across.status == "unknown" and "whether it applies" in across.detail
    above = restore({"prefill": 0.3, "late": 0.05})  # 0.25..0.3 s: applies, and fails
    assert (above.status, above.not_applicable) == ("fail", 0)


def test_the_tables_say_where_a_gate_does_not_apply() -> None:
    p, gates = judged([{"cached": 0, "prefill": 0.5}, {}, {}])

    class Results:
        pass
    res = Results()
    res.gates = list(gates.values())
    res.records = recs(p, [{"cached": 0, "prefill": 0.5}, {}, {}])
    res.verdicts = session_verdicts(p, res.gates)
    row = next(r for r in gate_rows(res) if r[0] == "restore")
    assert row[2] == "PASS" and row[5] == "8/0/0, 1 n/a"
    assert row[7].startswith("s#0: does not apply: `cached_tokens{fin} >= ")
    cells = {r[0]: r for r in session_rows(res, [gates["restore"]])}
    assert cells["s#0"][-1] == "n/a (does not apply)" and cells["s#1"][-1] != cells["s#0"][-1]


def test_the_condition_is_checked_and_planned_like_the_gate() -> None:
    bad = WL.replace("when cached_tokens{fin}", "when cached_tokns{fn}")
    codes = sorted(d.code for d in check(parse(bad, "w.wl")))
    assert codes == ["WL203", "WL206"]
    assert check(parse(WL.replace("when all(hit{fin})", "when count(hit{fin})"), "w.wl"))[0] \
        .code == "WL307"
    # a selector that matches no planned request, in the condition: WL405 says so
    text = WL.replace("when all(hit{fin})", "when all(hit{fin, warm})")
    with pytest.raises(WorkloadError) as e:
        plan(text)
    assert [d.code for d in e.value.diagnostics] == ["WL405"]
    assert "gate `quick`'s condition" in e.value.diagnostics[0].message
    # the dry run shows each condition and counts what it reads
    p = plan()
    block = gates_block(p)
    assert "applies when" in block and "cached_tokens{fin} >= 10% * prompt_tokens{fin}" in block
    assert p.gates[0].reads == {"s#0": 1, "s#1": 1, "s#2": 1}


def test_a_gate_without_a_condition_leaves_it_out_of_its_json() -> None:
    wl = parse(WL, "w.wl")
    assert '"when"' in wl.gates[0].model_dump_json()
    plain = parse(WL.replace(" when all(hit{fin})", ""), "w.wl").gates[1]
    assert '"when"' not in plain.model_dump_json()


def test_when_is_still_a_name_where_a_name_stands() -> None:
    text = """
    workload w {
      params { when: int = 1 }
      session main { turn when { user "hi"; reply $when label when } }
      gates {
        when: each session ttft{when} < 2s when cached_tokens{when} > $when warn
        other: overall all(ok{when})
      }
    }
    """
    wl = parse(text, "w.wl")
    assert check(wl) == []
    assert [g.name for g in wl.gates] == ["when", "other"]
    assert wl.gates[0].when.text == "cached_tokens{when} > $when"
    with pytest.raises(WorkloadError) as e:
        parse(text.replace("2s when", "2s wen"), "w.wl")
    assert "did you mean `when`?" in (e.value.diagnostics[0].hint or "")
