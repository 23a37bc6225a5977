"""Nothing lost: `wl run` (a real subprocess) against the simulator, stopped mid-run.

* SIGKILL: the `--records` JSONL is valid line by line, and holds every request the simulator
  completed except at most the ones in flight when the process died (the concurrency limit).
* SIGINT / SIGTERM: exit 130, `--output` and the JSONL both written with a record of every
  planned request: the ones measured; the ones in flight at the signal as sent, with their send
  time and error `interrupted`; the rest marked skipped (never sent); gates judged.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultserver import wl_command
from workloadlang.sim import SimConfig, start_in_thread

SESSIONS, STEPS = 4, 40
WORKLOAD = f"""
workload many {{
  session s repeat {SESSIONS} {{ repeat {STEPS} label step {{ user "hello"; reply 8 }} }}
  gates {{ clean: overall count(error{{step}}) == 0 }}
}}
"""
# 8 tokens at 10 ms each: ~80 ms a request, ~3 s a session; the run is stopped long before.
SIM = SimConfig(decode_us_per_token=10_000, prefill_us_per_token=1)
STOP_AFTER = 12  # request lines seen before the signal


@pytest.fixture
def sim() -> Iterator[Any]:
    with start_in_thread(SIM) as handle:
        yield handle


def start(tmp_path: Path, base_url: str) -> tuple[subprocess.Popen, Path, Path]:
    wl = tmp_path / "w.wl"
    wl.write_text(WORKLOAD)
    out, rec = tmp_path / "out.json", tmp_path / "r.jsonl"
    proc = subprocess.Popen([*wl_command(), "run", str(wl), "--base-url", base_url, "--no-viz",
                             "--output", str(out), "--records", str(rec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out, rec


def wait_for_requests(proc: subprocess.Popen, rec: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if rec.exists() and rec.read_text().count('"type":"request"') >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"wl run ended early: {proc.returncode} {proc.stderr.read()}")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("no progress")


def request_lines(rec: Path) -> list[dict[str, Any]]:
    text = rec.read_text()
    assert text.endswith("\n"), "a torn last line"
    lines = [json.loads(line) for line in text.splitlines()]  # every line parses
    return [line for line in lines if line["type"] == "request"]


def test_sigkill_leaves_every_completed_request(tmp_path: Path, sim: Any) -> None:
    proc, out, rec = start(tmp_path, sim.base_url)
    wait_for_requests(proc, rec, STOP_AFTER)
    proc.kill()
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.2)  # let the simulator settle the streams that were cut
    reqs = request_lines(rec)
    ids = [r["id"] for r in reqs]
    assert len(ids) >= STOP_AFTER and len(set(ids)) == len(ids)
    for r in reqs:  # complete records of completed requests, not placeholders
        assert r["error"] is None and r["skipped"] is None
        assert r["completion_tokens"] == 8 and r["prompt_tokens"] and r["ttft_s"] is not None
    completed = sim.sim.counters.completed
    # every recorded request really completed; at most the ones in flight were lost
    assert len(reqs) <= completed <= len(reqs) + SESSIONS
    assert not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_writes_what_was_measured(tmp_path: Path, sim: Any, sig: int) -> None:
    proc, out, rec = start(tmp_path, sim.base_url)
    wait_for_requests(proc, rec, STOP_AFTER)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "INTERRUPTED" in stdout
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    jsonl = {r["id"]: r for r in lines if r["type"] == "request"}
    res = json.loads(out.read_text())
    assert res["exit_code"] == 130 and res["incomplete"] == "interrupted"
    assert len(res["records"]) == SESSIONS * STEPS  # every planned request has its record
    assert set(jsonl) == {r["id"] for r in res["records"]}  # and so has the JSONL
    sent = [r for r in res["records"] if not r["skipped"]]
    assert len(sent) >= STOP_AFTER and all(r["t_start_s"] is not None for r in sent)
    cut = [r for r in sent if r["error"] is not None]
    assert len(cut) <= SESSIONS  # at most the ones in flight
    assert all(r["error"]["kind"] == "interrupted" and r["hit"] is None for r in cut), cut
    assert all(jsonl[r["id"]]["error"] == r["error"] for r in cut)
    skipped = [r for r in res["records"] if r["skipped"]]
    assert skipped and all(r["skipped"] == "not run (interrupted)" for r in skipped)
    assert all(r["t_start_s"] is None for r in skipped)  # never sent
    assert [g["name"] for g in res["gates"]] == ["clean"]  # judged on what was measured
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_code"] == 130
