"""The workloads a new user writes from the docs, run as that user runs them: each checks clean
(`ok` on stdout), plans what it can promise, and runs on the simulator with figures a reader
cannot misread: the cache line puts the measured share next to what a perfect cache certainly
and possibly serves, and says where the measured one falls; caps, arrivals, forks, waits, tool
calls and a trace replay each show what the plan promised, no more.

The workloads are tests/data/user-workloads/*.wl (shared system prompt, branching agent with
parallel forks, idle resume under a Poisson flood, multi-turn chat with think time, a capped
tenant flood, multi-round QA, Poisson sessions on a shared prompt, an agent with tool calls and
forked sub-agents) and the bundled `mooncake` on a slice of a real trace.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from workloadlang.cli.main import main as wl_main

DATA = Path(__file__).parents[1] / "data"
USER = DATA / "user-workloads"
SLICE = DATA / "mooncake" / "conversation_1000.jsonl"
NAMES = sorted(p.stem for p in USER.glob("*.wl"))
LINE = re.compile(r"^cache hit rate over (\d+) request\(s\), of prompt tokens: measured "
                  r"([\d.]+)%; a perfect cache: certain ([\d.]+)%, possible ([\d.]+)% "
                  r"\(measured within the range\)(?:; up to (\d+) requests in flight at once, "
                  r"the theory takes them one at a time)?$", re.M)


def wl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = wl_main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str,
        *args: str) -> tuple[dict[str, Any], str, re.Match]:
    """`wl run TARGET --sim`: the results, the printed text and its cache line (which must
    say the measured share is within the perfect cache's range)."""
    out = tmp_path / "results.json"
    code, text, _ = wl(capsys, "run", target, "--sim", "--no-viz", "--salt", "user",
                       "--output", str(out), *args)
    assert code == 0, text[-2000:]
    res = json.loads(out.read_text())
    line = LINE.search(text)
    assert line is not None, [x for x in text.splitlines() if x.startswith("cache hit")]
    theory = res["cache_theory"]
    assert theory["range"] == "within"
    assert line.group(2) == f"{100 * theory['measured']:.1f}"
    assert line.group(3) == f"{100 * theory['certain']:.1f}"
    assert line.group(4) == f"{100 * theory['possible']:.1f}"
    return res, text, line


def test_every_user_workload_checks_clean(capsys: pytest.CaptureFixture[str]):
    paths = [str(USER / f"{n}.wl") for n in NAMES]
    code, out, err = wl(capsys, "check", *paths)
    assert len(NAMES) == 8 and code == 0 and err == ""
    assert out.splitlines() == [f"{p}: ok" for p in paths]


def plan_text(capsys: pytest.CaptureFixture[str], name: str) -> str:
    code, out, _ = wl(capsys, "plan", str(USER / f"{name}.wl"), "--salt", "user")
    assert code == 0
    return out


def test_a_phase_makes_the_shared_prompt_certain(capsys, tmp_path):
    plan = plan_text(capsys, "shared-system")
    assert "exp. max" not in plan and "possible" not in plan
    res, _, line = run(capsys, tmp_path, str(USER / "shared-system.wl"))
    assert line.group(3) == line.group(4)  # nothing left to chance: certain is possible
    assert res["exit_code"] == 0


def test_parallel_branches_are_told_apart(capsys, tmp_path):
    res, text, line = run(capsys, tmp_path, str(USER / "branching-agent.wl"))
    refine = [x for x in text.splitlines() if " refine[" in x]
    assert len(refine) == 6 and len({x.split()[1:4][-1] for x in refine}) == 3
    assert {r["lane"] for r in res["records"] if r["label"] == "refine"} == {"0.0", "0.1", "0.2"}
    assert line.group(5) == "3"


def test_the_user_comes_back_during_the_flood(capsys, tmp_path):
    res, _, _ = run(capsys, tmp_path, str(USER / "idle-resume.wl"))
    recs = {r["label"]: r for r in res["records"]}
    flood_end = max(r["t_start_s"] + r["e2e_s"] for r in res["records"]
                    if r["label"] == "one_shot")
    assert recs["resume"]["t_start_s"] < flood_end


def test_a_chat_with_think_time_waits_as_planned(capsys, tmp_path):
    plan = plan_text(capsys, "chat-think")
    assert "reading 2,000/s" in plan
    res, _, line = run(capsys, tmp_path, str(USER / "chat-think.wl"))
    assert float(line.group(2)) > 50


def test_a_capped_flood_counts_at_most_its_cap(capsys, tmp_path):
    plan = plan_text(capsys, "tenant-flood")
    assert "concurrency 9" in plan.splitlines()[2]
    assert re.search(r"peak concurrent demand\s+[\d,]+ tokens \(9 in flight\)", plan)
    res, text, line = run(capsys, tmp_path, str(USER / "tenant-flood.wl"))
    assert line.group(5) == "9" and "concurrency 24" not in text
    tenants = [(r["t_start_s"], r["t_start_s"] + r["e2e_s"]) for r in res["records"]
               if r["label"] == "one_shot"]
    assert max(sum(1 for s, e in tenants if s <= t < e) for t, _ in tenants) <= 8
    gate = next(g for g in res["gates"] if g["name"] == "on_time")
    assert gate["kind"] == "duration"
    shown = next(x for x in text.splitlines() if x.startswith("on_time"))
    assert re.search(r"\s[\d.]+m?s\s+10s\s", shown)  # a duration next to its threshold


def test_the_first_arrival_is_promised_nothing_of_the_later_ones(capsys, tmp_path):
    plan = plan_text(capsys, "multi-round-qa")
    rows = [x.split() for x in plan.splitlines() if x.startswith("user#")]
    first = [r for r in rows if r[3] == "0"]
    assert [r[0] for r in first] == ["user#0", "user#1", "user#2"]
    assert first[0][9] == "–" and first[1][9] != "–"  # the exp. max column
    assert "- 2 request(s) share up to" in plan
    res, _, line = run(capsys, tmp_path, str(USER / "multi-round-qa.wl"))
    assert float(line.group(3)) < float(line.group(2)) <= float(line.group(4))


def test_poisson_sessions_on_a_shared_prompt_are_measured_within_the_range(capsys, tmp_path):
    plan = plan_text(capsys, "poisson-shared")
    assert re.search(r"expected from cache \(certain\)\s+0 \(0\.0%\)", plan)
    assert re.search(r"up to \(possible: other sessions first\)\s+[\d,]+ \(\d\d\.\d%\)", plan)
    res, _, line = run(capsys, tmp_path, str(USER / "poisson-shared.wl"))
    assert line.group(3) == "0.0" and float(line.group(2)) > 50  # measured far above certain


def test_an_agent_with_tools_and_sub_agents(capsys, tmp_path):
    plan = plan_text(capsys, "agent-tools")
    assert re.search(r"tool calls\s+4 \(", plan)
    res, text, _ = run(capsys, tmp_path, str(USER / "agent-tools.wl"))
    assert res["exit_code"] == 0 and len([x for x in text.splitlines() if " lane " in x]) == 4


def test_a_trace_replayed_as_fast_as_the_concurrency_allows(capsys, tmp_path):
    res, text, line = run(capsys, tmp_path, "mooncake", "--trace", str(SLICE), "--limit", "40",
                          "--time-scale", "0", "--max-concurrency", "2", "--max-tokens", "4",
                          "--block-tokens", "16")
    assert line.group(1) == "40" and res["client"]["scheduled"] == 0
    assert "after their planned time" not in text  # as fast as it can go is on schedule
