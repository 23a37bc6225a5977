"""plan: the size limits (WL408) refuse a plan before building it, naming the statement.

Input: `.wl` texts (and bundled workloads with flags) whose plans are far beyond the limits
(with numbers up to the largest a file may hold, 1e15).
Output checked: the diagnostic's code, statement line and hint; that the refusal allocates little
(traced peak memory: a refusal that first built the plan would take gigabytes); that `wl plan`
exits 2 without a traceback; that the limits are overridable and a plan within them is planned.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from workloadlang import api
from workloadlang.cli.main import main as wl_main
from workloadlang.diagnostics import Diagnostic, WorkloadError
from workloadlang.plan.limits import Limits

T = "1000000000000"  # 1e12
G = "1000000000"  # 1e9

HUGE = {
    "repeat": f'workload w {{ session s {{\n  repeat {T} {{ user "x"; reply 1 }}\n}} }}',
    "session_repeat": f'workload w {{\n  session s repeat {G} {{ user "x"; reply 1 }}\n}}',
    "for": f'workload w {{ session s {{\n  for i in 0..{T} {{ user "x"; reply 1 }}\n}} }}',
    "spawn": f'workload w {{ session s {{\n  spawn {G} {{ user "x"; reply 1 }}\n}} }}',
    # the largest number a file may hold (1e15; larger is WL111 when parsed, WL404 computed)
    "filler_1e15": 'workload w { session s {\n  user filler 1' + "0" * 15 + '; reply 1\n} }',
    "reply_1e15": 'workload w { session s {\n  user "x"; reply 1' + "0" * 15 + '\n} }',
    "filler_1e10": 'workload w { session s {\n  user filler 10000000000; reply 1\n} }',
    "empty_loops": 'workload w { session s {\n  repeat 90000 { repeat 90000 { } }\n'
                   '  user "x"; reply 1 } }',
    "requests_by_projection": 'workload w { session s {\n  repeat 40000 { repeat 3 '
                              '{ user "x"; reply 1 } } } }',
    "messages": 'workload w { session s {\n  repeat 40000 { user "a"; user "b"; user "c"; '
                'user "d"; user "e"; user "f"; user "g"; user "h"; user "i"; reply 1 } } }',
    "quadratic_growth": 'workload w { session s {\n  grow until 40k by 1 '
                        '{ user filler 1; reply 64 } } }',
}


def refused(text: str, limits: Limits | None = None) -> tuple[Diagnostic, int]:
    """Plan `text`; output: its one WL408 diagnostic and the traced peak memory in bytes."""
    source = api.Source(name="t.wl", text=text)
    wl = api.parse_checked(source)
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadError) as exc:
            api.make_plan(wl, source, {}, salt="s", limits=limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (diag,) = [d for d in exc.value.diagnostics if d.code == "WL408"]
    return diag, peak


@pytest.mark.parametrize("name", sorted(HUGE))
def test_a_huge_plan_is_refused_at_its_statement_before_it_is_built(name: str):
    diag, peak = refused(HUGE[name])
    assert diag.span is not None and diag.span.line == 2, diag
    assert "more than" in diag.message and "--max-" in (diag.hint or "")
    assert peak < 30_000_000, f"{peak:,} bytes traced before refusing"


def test_the_refusal_names_the_limit_it_passes():
    assert "repeat count is 1,000,000,000,000" in refused(HUGE["repeat"])[0].message
    assert "--max-request-tokens" in refused(HUGE["filler_1e10"])[0].hint
    assert "filler size is 10,000,000,000 tokens" in refused(HUGE["filler_1e10"])[0].message
    assert "max_tokens is" in refused(HUGE["reply_1e15"])[0].message
    growth = refused(HUGE["quadratic_growth"])[0]
    assert "prompt tokens in all" in growth.message and "--max-total-tokens" in growth.hint


def test_limits_are_overridable():
    text = 'workload w { session s { repeat 15 { user "x"; reply 1; reply 1 } } }'
    diag, _ = refused(text, Limits(requests=20))
    assert "would plan about 30 requests" in diag.message
    source = api.Source(name="t.wl", text=text)
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="s",
                         limits=Limits(requests=30))
    assert len(plan.requests) == 30


def test_a_single_request_over_the_token_limit_is_refused():
    text = 'workload w { session s {\n  user filler 600; reply 500 } }'
    diag, _ = refused(text, Limits(request_tokens=1000))
    assert diag.span.line == 2 and "needs 1,107 tokens" in diag.message


@pytest.mark.parametrize("args", [
    ["abort-sim", "--runs", "100000000"],
    ["agent-sim", "--step-tokens", "1"],
    ["cache-pressure", "--kv-size", "1000000000000"],
])
def test_bundled_workloads_with_huge_params_exit_2(capsys, args: list[str]):
    assert wl_main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert "error[WL408]" in err and "Traceback" not in err


def test_the_limit_flags_reach_the_planner(capsys, tmp_path: Path):
    f = tmp_path / "w.wl"
    f.write_text('workload w { session s { repeat 30 { user "x"; reply 1 } } }')
    assert wl_main(["plan", str(f), "--max-requests", "29"]) == 2
    assert "error[WL408]" in capsys.readouterr().err
    assert wl_main(["plan", str(f), "--max-requests", "30"]) == 0
    assert wl_main(["plan", str(f), "--max-request-tokens", "10"]) == 2
    assert wl_main(["plan", str(f), "--max-total-tokens", "100"]) == 2
