"""`wl run` reads, checks and resolves the workload before it starts the simulator or reaches an
engine, and plans it then too when the plan needs nothing of the engine (`--max-context` given):
a workload that cannot run is refused at once (exit 2), with no `simulator:` line and no
connection tried (docs/cli.md "Exit codes")."""

from __future__ import annotations

import socket

import pytest

from workloadlang.cli.main import main


def closed_port() -> int:
    """A loopback port nothing listens on (an engine there is unreachable: exit 3)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def bad(tmp_path):
    path = tmp_path / "bad.wl"
    path.write_text("workload w {\n  sesion main { }\n}\n", encoding="utf-8")
    return str(path)


def test_a_syntax_error_comes_before_the_simulator_starts(bad, capsys):
    assert main(["run", bad, "--sim", "--no-viz"]) == 2
    err = capsys.readouterr().err
    assert "error[WL101]" in err and "did you mean `session`?" in err
    assert "simulator:" not in err


def test_a_syntax_error_comes_before_the_engine_is_reached(bad, capsys):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    assert main(["run", bad, "--base-url", url, "--no-viz"]) == 2  # not 3: never reached
    assert "error[WL101]" in capsys.readouterr().err


@pytest.mark.parametrize("flags, said", [
    (["--sessions", "abc"], "error[WL404]"),  # a param value that is no number
    (["--sessions", "0"], "error[WL401]"),  # out of its range
    (["--sweep", "sessions=1,0"], "error[WL401]"),  # a sweep's point out of its range
    (["--sweep", "nope=1,2"], "--sweep nope=1,2: write NAME=V1,V2"),
    (["--search", "sessions=1..4"], "declares no SLOs"),
    (["--cache-block", "8"], "--cache-block needs --cache-tokens"),
    # the plan needs nothing of the engine: planned, and refused, before the simulator starts
    (["--max-context", "1000000", "--max-requests", "3"], "error[WL408]"),
])
def test_what_the_workload_refuses_comes_before_the_simulator_starts(flags, said, capsys):
    assert main(["run", "agent-sim", "--sim", "--no-viz", "--salt", "s", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "simulator:" not in err and "Traceback" not in err


def test_a_param_that_needs_the_engines_context_limit_waits_for_the_engine(capsys):
    # perf-sim's `context_limit` defaults to `$max_context`: only the engine can say it, so the
    # workload is not refused before the engine is reached (here: unreachable, exit 3)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    assert main(["run", "perf-sim", "--base-url", url, "--no-viz", "--salt", "s"]) == 3
    err = capsys.readouterr().err
    assert "WL407" not in err and "endpoint error" in err


def test_the_api_checks_what_it_would_refuse_without_an_engine():
    """`api.check_runs`: what `plan_runs` refuses before it plans (a sweep that cannot run, a
    point's param out of range), checked without an engine; a param that needs the engine's
    context limit is left to the plan."""
    from workloadlang import api
    from workloadlang.diagnostics import WorkloadError

    wl = api.parse_checked(api.load("agent-sim"))
    api.check_runs(wl, api.PlanOptions(sweep="sessions=1,2"))
    with pytest.raises(WorkloadError, match="out of its range"):
        api.check_runs(wl, api.PlanOptions(sweep="sessions=1,0"))
    with pytest.raises(api.SweepError, match="the param is also set"):
        api.check_runs(wl, api.PlanOptions(overrides={"sessions": "2"}, sweep="sessions=1,2"))
    perf = api.parse_checked(api.load("perf-sim"))
    api.check_runs(perf, api.PlanOptions())  # `$max_context` unknown: not refused here
    with pytest.raises(WorkloadError, match="WL407|context limit"):
        api.plan_runs(perf, api.load("perf-sim"), api.PlanOptions())
