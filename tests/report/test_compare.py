"""`wl compare`: results built here and written to tmp files, compared through the command."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from workloadlang.compare import (
    CompareRequest,
    compare_command,
    fmt_delta,
    gate_changes,
    headline,
    load_results,
)
from workloadlang.gates import GateResult, ScopeResult
from workloadlang.results import ErrorDetail, Record, Results


def record(i: int, *, session: str = "s1", warm: bool = True, reuse: float | None = 1.0,
           hit: bool | None = True, ttft: float | None = 0.2, prompt: int = 1000,
           cached: int | None = 900, error: bool = False, skipped: bool = False) -> Record:
    base = dict(id=f"{session}/main/{i}", seq=i, session=session, phase="", label="main", index=i,
                kind="reply", line=3, planned_prompt_tokens=prompt,
                planned_expected_cached=900 if warm else 0, new_tokens=100, max_tokens=16)
    if skipped:
        return Record(**base, skipped="until: seen")
    if error:
        return Record(**base, error=ErrorDetail(kind="http", message="500", status=500))
    return Record(**base, prompt_tokens=prompt, cached_tokens=cached, reuse=reuse if warm else None,
                  hit=hit if warm else None, ttft_s=ttft, expected_cached=900 if warm else 0)


def gate(name: str, status: str, value: Any = None, *, severity: str = "fail",
         sessions: dict[str, str] | None = None) -> GateResult:
    if sessions is None:
        results = [ScopeResult(scope="overall", status=status, value=value, threshold=0.9)]
        scope = "overall"
    else:
        results = [ScopeResult(scope=s, status=st, value=value) for s, st in sessions.items()]
        scope = "each session"
    return GateResult(name=name, scope=scope, severity=severity, verdict="evicted", line=7,
                      status=status, results=results)


def results(**over: Any) -> Results:
    base: dict[str, Any] = dict(
        workload="agent_sim", source="agent-sim.wl", params={"sessions": 2}, salt="abc123",
        plan_hash="h-1", engine={"engine": "vllm", "model": "m"},
        started_at="2024-05-01T10:00:00+00:00", elapsed_s=12.5, hit_ratio=0.9, calibration={},
        metrics={"engine_hit_ratio": 0.8}, client={}, incomplete=None, exit_code=0,
        gates=[gate("main_reuse", "pass", 0.95),
               gate("survival", "pass", sessions={"s1": "pass", "s2": "pass"})],
        verdicts={"s1": "ok", "s2": "ok"},
        report={"main_reused": 3, "pp": {"1": 1200.0, "2": 900.5}, "flat": 0.5},
        records=[record(0, warm=False, ttft=1.0), record(1), record(2, ttft=0.4),
                 record(3, hit=False, reuse=0.5, cached=450), record(4, error=True),
                 record(5, skipped=True)])
    base.update(over)
    return Results(**base)


def write(tmp_path: Path, name: str, r: Results) -> str:
    path = tmp_path / name
    path.write_text(r.to_json(), encoding="utf-8")
    return str(path)


def run(tmp_path: Path, a: Results | str, b: Results | str) -> tuple[int, str, str]:
    pa = a if isinstance(a, str) else write(tmp_path, "a.json", a)
    pb = b if isinstance(b, str) else write(tmp_path, "b.json", b)
    out, err = io.StringIO(), io.StringIO()
    code = compare_command(CompareRequest(a=pa, b=pb), out, err)
    return code, out.getvalue(), err.getvalue()


def row(text: str, name: str) -> list[str]:
    """The cells of the table row whose first cell is `name`."""
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} in:\n{text}")


# ---------------------------------------------------------------- tables and verdicts


def test_same_plan_gives_the_table_and_verdicts(tmp_path: Path) -> None:
    b = results(elapsed_s=10.0, metrics={"engine_hit_ratio": 0.9},
                report={"main_reused": 4, "pp": {"1": 1300.0, "2": 900.5}, "flat": 0.5})
    code, out, err = run(tmp_path, results(), b)
    assert code == 0 and err == ""
    assert row(out, "main_reused") == ["main_reused", "3", "4", "+1", "+33.3%"]
    assert row(out, "pp[1]") == ["pp[1]", "1,200", "1,300", "+100", "+8.3%"]
    assert row(out, "requests") == ["requests", "5", "5", "0", "0%"]
    assert row(out, "errors") == ["errors", "1", "1", "0", "0%"]
    assert row(out, "skipped")[1:3] == ["1", "1"]
    assert row(out, "warm hits")[1] == "2" and row(out, "warm misses")[1] == "1"
    assert row(out, "warm mean reuse")[1] == "83.3%"  # (1 + 1 + 0.5) / 3
    assert row(out, "warm median ttft")[1] == "0.200s"
    assert row(out, "cold median ttft")[1] == "1.000s"
    assert row(out, "prompt tokens")[1] == "4,000" and row(out, "cached tokens")[1] == "3,150"
    assert row(out, "engine hit ratio") == ["engine hit ratio", "80.0%", "90.0%", "+10.0pp", "+12.5%"]
    assert row(out, "elapsed") == ["elapsed", "12.500s", "10.000s", "-2.500s", "-20.0%"]
    assert row(out, "main_reuse")[-1] == "unchanged pass"
    assert row(out, "survival")[-1] == "unchanged pass"
    assert "no regression" in out


def test_a_zero_delta_and_zero_values_are_shown(tmp_path: Path) -> None:
    a = results(report={"flat": 0.0, "same": 0.25}, metrics={"engine_hit_ratio": 0.0})
    b = results(report={"flat": 0.0, "same": 0.25}, metrics={"engine_hit_ratio": 0.0})
    _, out, _ = run(tmp_path, a, b)
    assert row(out, "flat") == ["flat", "0", "0", "0", "0%"]
    assert row(out, "same") == ["same", "0.25", "0.25", "0", "0%"]
    assert row(out, "engine hit ratio") == ["engine hit ratio", "0", "0", "0", "0%"]


def test_delta_formatting() -> None:
    assert fmt_delta("ratio", 0.0, 0.05) == ("+5.0pp", "–")  # from 0: no % change
    assert fmt_delta("count", 10, 7) == ("-3", "-30.0%")
    assert fmt_delta("number", None, 3) == ("–", "–")
    assert fmt_delta("number", True, False) == ("changed", "–")


def test_regressed_gate_exits_1(tmp_path: Path) -> None:
    b = results(gates=[gate("main_reuse", "fail", 0.5),
                       gate("survival", "pass", sessions={"s1": "pass", "s2": "pass"})])
    code, out, _ = run(tmp_path, results(), b)
    assert code == 1
    assert row(out, "main_reuse")[1:] == ["overall", "pass (0.95)", "fail (0.5)", "REGRESSED"]
    assert "B fails what A passed: main_reuse" in out


def test_one_regressed_session_exits_1_even_when_the_gate_stays_failed(tmp_path: Path) -> None:
    a = results(gates=[gate("survival", "fail", sessions={"s1": "pass", "s2": "fail"})])
    b = results(gates=[gate("survival", "fail", sessions={"s1": "fail", "s2": "pass"})])
    code, out, _ = run(tmp_path, a, b)
    assert code == 1
    changes = {(c.gate, c.scope): c.change for c in gate_changes(load_results(str(tmp_path / "a.json")),
                                                                 load_results(str(tmp_path / "b.json")))}
    assert changes == {("survival", "each session"): "unchanged fail",
                       ("survival", "s1"): "regressed", ("survival", "s2"): "fixed"}
    assert "survival[s1]" in out and "1 fixed, 1 regressed" in out


def test_fixed_gate_exits_0(tmp_path: Path) -> None:
    a = results(gates=[gate("main_reuse", "fail", 0.5)])
    b = results(gates=[gate("main_reuse", "pass", 0.97)])
    code, out, _ = run(tmp_path, a, b)
    assert code == 0
    assert row(out, "main_reuse")[-1] == "fixed"


def test_unknown_counts_as_not_passed_and_warn_regressions_do_not_fail(tmp_path: Path) -> None:
    a = results(gates=[gate("w", "pass", 1.0, severity="warn"), gate("u", "unknown")])
    b = results(gates=[gate("w", "fail", 0.1, severity="warn"), gate("u", "pass", 1.0)])
    code, out, _ = run(tmp_path, a, b)
    assert code == 0
    assert row(out, "w")[-1] == "regressed (warn)" and row(out, "u")[-1] == "fixed"


def test_gate_only_on_one_side(tmp_path: Path) -> None:
    a = results(gates=[gate("old", "pass", 1.0)])
    b = results(gates=[gate("new", "fail", 0.0)])
    code, out, _ = run(tmp_path, a, b)
    assert code == 0
    assert row(out, "old")[-1] == "only in A" and row(out, "new")[-1] == "only in B"


# ---------------------------------------------------------------- refusals


def test_different_plan_hash_is_refused_with_the_reason(tmp_path: Path) -> None:
    b = results(plan_hash="h-2", salt="zzz", params={"sessions": 3})
    code, out, err = run(tmp_path, results(), b)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("wl compare: not comparable")
    assert "salt abc123 vs zzz" in err and "sessions=2 vs 3" in err
    assert "--salt abc123" in err


@pytest.mark.parametrize("content, words", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"schema": "something.else/1"}), "is not a workloadlang results file"),
    (json.dumps({"schema": "workloadlang.results/1", "workload": "x"}), "is not a valid results file"),
])
def test_unreadable_or_foreign_files_are_refused(tmp_path: Path, content: str | None, words: str) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content, encoding="utf-8")
    code, out, err = run(tmp_path, results(), str(bad))
    assert code == 2 and out == "" and words in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_schema_key_is_mapped_and_the_file_round_trips(tmp_path: Path) -> None:
    path = write(tmp_path, "r.json", results())
    assert json.loads(Path(path).read_text())["schema"] == "workloadlang.results/2"
    loaded = load_results(path)
    assert loaded.schema_ == "workloadlang.results/2"
    assert headline(loaded)["warm unknown"] == ("count", 0)


def test_a_session_where_the_gate_did_not_apply_is_not_a_pass(tmp_path: Path) -> None:
    """A scope that passed only because the gate's `when` was false shows as `n/a`, and a change
    to or from it is neither fixed nor regressed (nothing was judged there)."""
    def restore(sessions: dict[str, tuple[str, int]]) -> GateResult:
        rs = [ScopeResult(scope=s, status=st, value=1.0, not_applicable=na)
              for s, (st, na) in sessions.items()]
        return GateResult(name="restore", scope="each session", severity="fail", verdict="degraded",
                          line=9, status="pass" if all(st == "pass" for st, _ in sessions.values())
                          else "fail", results=rs)
    a = results(gates=[restore({"s1": ("pass", 0), "s2": ("fail", 0), "s3": ("pass", 1)})])
    b = results(gates=[restore({"s1": ("pass", 1), "s2": ("pass", 1), "s3": ("pass", 1)})])
    changes = {c.scope: c for c in gate_changes(a, b)}
    assert (changes["s1"].a, changes["s1"].b) == ("pass", "n/a")
    assert changes["s1"].change == "not applicable in B"
    assert changes["s2"].change == "not applicable in B"  # not `fixed`: B judged nothing there
    assert changes["s3"].change == "not applicable in both"
    assert not any(c.fails_compare for c in changes.values())
    code, out, _ = run(tmp_path, a, b)
    assert code == 0
    table = {tuple(re.split(r"\s{2,}", ln.strip())[:2]): re.split(r"\s{2,}", ln.strip())[2:]
             for ln in out.splitlines() if ln.startswith("restore")}
    assert table[("restore", "s2")] == ["fail (1)", "n/a (1)", "not applicable in B"]
    assert table[("restore", "each session")] == ["fail", "n/a", "not applicable in B"]
