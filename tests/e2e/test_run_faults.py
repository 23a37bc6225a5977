"""`wl run` (the CLI's `main`, in the test process) against a REAL misbehaving loopback server
(tests/faultserver.py): every fault gives a recorded error of the right kind in the records and
the results, the exit code docs/cli.md documents, and never a Python traceback. What only a real
process shows (signals, peak memory, the environment's keys) is in test_run_nothing_lost.py,
test_hostile_engine.py and test_run_secrets.py.

Exit codes under test: 3 when the endpoint is unreachable or `/models` is unusable (no chat
request is sent); 4 when the run is incomplete because every request failed or 10 failed in a
row; 1 when a gate fails on a recorded error; 0 when some requests failed but every gate passed.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from faultserver import FaultServer, run_wl_here

TINY = """
workload tiny {
  timeout = 2s
  session s repeat 3 { turn ask { user "hello"; reply 4 } }
}
"""

SERIAL = """
workload serial {
  timeout = 2s
  session s { repeat 12 label ask { user "hello"; reply 4 } }
}
"""

GATED = """
workload gated {
  timeout = 2s
  session s repeat 3 { turn ask { user "hello"; reply 4 } }
  gates { clean: overall count(error{ask}) == 0 }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def wl_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "w.wl"
    path.write_text(text)
    return str(path)


def run(tmp_path: Path, base_url: str, text: str = TINY, *extra: str) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """Output: the finished process, the `--output` JSON ({} when absent) and the JSONL lines."""
    out, rec = tmp_path / "out.json", tmp_path / "r.jsonl"
    proc = run_wl_here("run", wl_file(tmp_path, text), "--base-url", base_url, "--no-viz",
                       "--output", str(out), "--records", str(rec), *extra)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    results = json.loads(out.read_text()) if out.exists() else {}
    lines = [json.loads(line) for line in rec.read_text().splitlines()] if rec.exists() else []
    return proc, results, lines


def requests_of(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["type"] == "request"]


@pytest.mark.parametrize(("fault", "kind", "status"), [
    ("http500", "http", 500),
    ("http429", "http", 429),
    ("cut", "stream_cut", 200),
    ("malformed", "malformed", 200),
    ("engine_error", "engine", 200),
    ("stall", "timeout", 200),      # one token, then silence past the 1 s total deadline
    ("prefill", "timeout", None),   # not a byte before the 1 s total deadline
])
def test_every_request_failing_is_recorded_and_exits_4(tmp_path: Path, server: FaultServer,
                                                      fault: str, kind: str, status: int | None) -> None:
    server.defaults = {"x-fault": fault}
    # the stalls wait for the deadline: a shorter one than the other cases' (which need room)
    text = TINY.replace("timeout = 2s", "timeout = 1s") if kind == "timeout" else TINY
    proc, results, lines = run(tmp_path, server.base_url, text)
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    reqs = requests_of(lines)
    assert len(reqs) == 3 and len(server.chat_requests()) == 3
    for rec in [*reqs, *results["records"]]:
        assert rec["error"]["kind"] == kind, rec["error"]
        assert rec["error"]["status"] == status
        assert rec["hit"] is None and rec["reuse"] is None  # an error is neither hit nor miss
        if fault == "http500":  # the engine's own message is kept
            assert "CUDA out of memory" in rec["error"]["message"]
    assert results["exit_code"] == 4 and "every request failed" in results["incomplete"]
    assert proc.stdout.count(f"err={kind}") == 3
    assert "INCOMPLETE" in proc.stdout
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_code"] == 4
    if kind == "timeout":
        for rec in reqs:  # the deadline is total: the client gave up at about 1 s, not 60 s
            assert 0.95 <= rec["e2e_s"] < 30
            assert server.disconnected(rec["id"]).wait(5), "the client never closed the stalled stream"


def test_ten_errors_in_a_row_stop_the_run(tmp_path: Path, server: FaultServer) -> None:
    server.defaults = {"x-fault": "http500"}
    proc, results, lines = run(tmp_path, server.base_url, SERIAL)
    assert proc.returncode == 4
    assert results["incomplete"] == "too many errors (10 in a row)"
    reqs = requests_of(lines)
    assert [r["error"]["kind"] for r in reqs if r["error"]] == ["http"] * 10
    assert [r["skipped"] for r in reqs if r["skipped"]] == ["too many errors (10 in a row)"] * 2
    assert len(server.chat_requests()) == 10  # the skipped ones were never sent


def test_a_spent_time_budget_stops_the_run_and_exits_4(tmp_path: Path, server: FaultServer) -> None:
    """`--time-budget`: what was measured is kept, what was not sent yet is recorded as skipped
    (never sent), and the run exits 4. Each answer here takes ~0.3 s, the budget 1 s."""
    server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "100"}
    proc, results, lines = run(tmp_path, server.base_url, SERIAL, "--time-budget", "1")
    assert proc.returncode == 4, proc.stdout
    assert results["incomplete"] == "time budget exhausted"
    reqs = requests_of(lines)
    done = [r for r in reqs if not r["skipped"]]
    skipped = [r for r in reqs if r["skipped"]]
    assert len(reqs) == 12 and 2 <= len(done) <= 5, [r["skipped"] for r in reqs]
    assert all(r["ttft_s"] for r in done if not r["error"])
    # the one in flight when the budget ran out is cut there (before its first token, if it
    # was sent just before: then it has no TTFT), and says it was the budget
    cut = [r["error"] for r in done if r["error"]]
    assert len(cut) <= 1 and all(e["kind"] == "timeout" and "--time-budget" in e["message"]
                                 for e in cut), cut
    assert {r["skipped"] for r in skipped} == {"time budget exhausted"}
    assert len(server.chat_requests()) == len(done)


def test_a_time_budget_ends_a_run_that_waits_past_it(tmp_path: Path) -> None:
    """`wait 100s` with `--time-budget 1` was still running at 60 s: a wait ends with the
    budget, the run exits 4 and the request after the wait is recorded as not sent. (The
    timeout is the process's: the run itself takes a second or two.)"""
    from faultserver import run_wl

    wl = wl_file(tmp_path, 'workload w { session s { user "a"; reply 1; wait 100s; '
                           'user "b"; reply 1 } }')
    out = tmp_path / "out.json"
    proc = run_wl("run", wl, "--sim", "--no-viz", "--time-budget", "1", "--output", str(out),
                  timeout=60)
    assert proc.returncode == 4, proc.stderr
    results = json.loads(out.read_text())
    assert results["incomplete"] == "time budget exhausted"
    assert [r["skipped"] for r in results["records"]] == [None, "time budget exhausted"]


def test_some_errors_with_a_failing_gate_exit_1(tmp_path: Path, server: FaultServer) -> None:
    server.fault_for = lambda rid, body: "http429" if rid.startswith("s#1/") else None
    proc, results, lines = run(tmp_path, server.base_url, GATED)
    assert proc.returncode == 1, proc.stdout
    kinds = {r["session"]: (r["error"] or {}).get("kind") for r in requests_of(lines)}
    assert kinds == {"s#0": None, "s#1": "http", "s#2": None}
    gate = next(line for line in lines if line["type"] == "gate")
    assert gate["name"] == "clean" and gate["status"] == "fail"
    assert results["incomplete"] is None


def test_some_errors_without_gates_exit_0(tmp_path: Path, server: FaultServer) -> None:
    server.fault_for = lambda rid, body: "cut" if rid.startswith("s#2/") else None
    proc, results, _ = run(tmp_path, server.base_url)
    assert proc.returncode == 0, proc.stdout
    errors = [r["error"]["kind"] for r in results["records"] if r["error"]]
    assert errors == ["stream_cut"]


@pytest.mark.parametrize(("status", "body", "says"), [
    (500, {"error": {"message": "model is loading"}}, "HTTP 500: model is loading"),
    (200, "<html>not json</html>", "not JSON"),
    (200, {"object": "list", "data": []}, "lists no model"),
    (200, {"unexpected": 1}, "no model list"),
])
def test_unusable_models_exit_3_before_any_chat(tmp_path: Path, server: FaultServer,
                                               status: int, body: Any, says: str) -> None:
    server.models_status, server.models_body = status, body
    proc, results, lines = run(tmp_path, server.base_url)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert says in proc.stderr and "endpoint error" in proc.stderr
    assert server.chat_requests() == [] and results == {}


def test_connection_refused_exits_3(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound, then closed: nothing listens there
    proc, results, _ = run(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert proc.returncode == 3
    assert "cannot connect" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr
    assert results == {}


FILLED = """
workload filled {
  session s repeat 2 {
    user filler 100 needle at 50%; reply 4; user filler 50 needle at 10%; reply 4
  }
}
"""


def test_tokenizer_failing_mid_run_is_a_note_not_a_crash(tmp_path: Path, server: FaultServer) -> None:
    """Plain filler is sized by arithmetic once the vocabulary is checked; a needle's text is
    counted by the tokenizer, which fails after the first one."""
    server.tokenize_fail_after = 5  # discovery's probe, the vocabulary's 3, then one needle
    proc, results, lines = run(tmp_path, server.base_url, FILLED)
    assert proc.returncode == 0, proc.stderr
    assert len(server.chat_requests()) == 4
    assert [r["error"] for r in results["records"]] == [None] * 4
    notes = [line for line in lines if line["type"] == "note"]
    assert len(notes) == 1 and "tokenizer crashed" in notes[0]["message"]
    assert "note: the engine's tokenizer failed" in proc.stdout


def test_tokenizer_failing_at_calibration_exits_3(tmp_path: Path, server: FaultServer) -> None:
    server.tokenize_fail_after = 1  # discovery's probe only
    proc, results, _ = run(tmp_path, server.base_url, FILLED)
    assert proc.returncode == 3
    assert "endpoint error" in proc.stderr and "tokenizer crashed" in proc.stderr
    assert server.chat_requests() == []


def test_usage_that_does_not_grow_falls_back_to_the_plan_estimate(tmp_path: Path, server: FaultServer) -> None:
    server.tokenize_shapes = ()  # no tokenizer: calibrate from usage, which here is always 100
    try:
        proc, results, _ = run(tmp_path, server.base_url, FILLED)
    finally:
        server.tokenize_shapes = ("prompt", "content")
    assert proc.returncode == 0, proc.stderr
    assert results["calibration"]["sizing"] == "plan"
    assert "1 token per word" in results["calibration"]["notes"][0]


@pytest.mark.parametrize("fault", ["linger", "cut_after_done"])
def test_what_follows_done_is_not_an_error(tmp_path: Path, server: FaultServer, fault: str) -> None:
    # the client reads a finished body to its end to keep the connection, but only briefly, and
    # a connection broken after [DONE] does not undo a complete answer
    server.defaults = {"x-fault": fault}
    proc, results, _ = run(tmp_path, server.base_url)
    assert proc.returncode == 0, proc.stdout
    for rec in results["records"]:
        assert rec["error"] is None and rec["completion_tokens"] == 5
        assert rec["e2e_s"] < 1.0  # measured at [DONE], not when the connection was given up
