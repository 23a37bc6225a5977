"""`wl run --workers N` on Ray (workloadlang.scale.ray_run): one local Ray instance with 2 CPUs
for the module, `wl run` as a user runs it (a subprocess) joining it with `--ray`, against the
embedded simulator started by the driver (the workers reach it over 127.0.0.1). Skipped when
Ray is not installed, unless WL_REQUIRE_RAY=1 (CI)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("WL_REQUIRE_RAY") != "1":
    pytest.importorskip("ray")
import ray  # noqa: E402

# a local Ray cluster takes the CPU: it runs beside shared tests, which read no time
pytestmark = pytest.mark.slow
WL = [sys.executable, "-m", "workloadlang.cli"]
# agent-sim and abort-sim at sizes that take a second or two on the simulator (the defaults take
# ~10 s): what is measured does not matter here, only where it ran and what came back of it
AGENT = ["agent-sim", "--sim", "--main-tokens", "8k", "--step-tokens", "1k", "--sub-tokens",
         "1500", "--finalize-tokens", "500", "--max-tokens", "16"]
ABORT = ["abort-sim", "--sim", "--context-tokens", "2k", "--thinking-tokens", "50",
         "--max-tokens", "2000", "--settle", "100ms"]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance (2 CPUs) for the module: its address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def wl_run(tmp_path: Path, name: str, *args: str,
           env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """`wl run ARGS --no-viz` in a subprocess. Output: exit code, the results JSON, what it
    printed (stdout, then stderr)."""
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([*WL, "run", *args, "--no-viz", "--output", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    printed = proc.stdout + proc.stderr
    return proc.returncode, json.loads(out.read_text()) if out.exists() else {}, printed


def evidence(results: dict) -> list[tuple]:
    """Per request: what was sent (planned and counted prompt; the simulator's reply is drawn
    from a seed of the prompt's length and its last message's text), and its cache evidence."""
    return [(r["id"], r["planned_prompt_tokens"], r["prompt_tokens"], r["reply_excerpt"],
             r["completion_tokens"], r["cached_tokens"], r["planned_expected_cached"],
             r["expected_cached"], r["hit"], r["skipped"])
            for r in results["records"]]


def judged(results: dict) -> list[tuple]:
    return [(g["name"], g["status"], [(r["scope"], r["status"]) for r in g["results"]])
            for g in results["gates"]]


def test_agent_sim_on_two_workers_is_the_single_process_run(cluster, tmp_path):
    """The same plan, requests, cache evidence and verdicts; the API key the workers were
    given is in no output and no Ray log."""
    key = "sk-RAYSECRET-" + os.urandom(6).hex()
    records = tmp_path / "two.jsonl"
    code1, one, err1 = wl_run(tmp_path, "one", *AGENT, "--salt", "same")
    code2, two, err2 = wl_run(tmp_path, "two", *AGENT, "--salt", "same",
                              "--workers", "2", "--ray", cluster, "--api-key-env", "WL_TEST_KEY",
                              "--records", str(records), env={"WL_TEST_KEY": key})
    assert code1 == code2 == 0, (err1[-2000:], err2[-2000:])
    assert two["plan_hash"] == one["plan_hash"]
    assert evidence(two) == evidence(one)
    assert two["verdicts"] == one["verdicts"] == {"main#0": "ok", "main#1": "ok", "main#2": "ok"}
    assert judged(two) == judged(one)
    workers = two["client"]["workers"]
    assert sorted(s for w in workers for s in w["sessions"]) == ["main#0", "main#1", "main#2"]
    assert len({w["pid"] for w in workers}) == 2  # two worker processes, neither the driver
    for w in workers:
        assert abs(w["clock_offset_s"]) <= 0.05 and w["records"] > 0
    left = [err2, records.read_text(), (tmp_path / "two.json").read_text()]
    assert not any(key in text for text in left)
    logs = [p for p in Path("/tmp/ray").glob("session_*/logs/*") if p.is_file()]
    assert logs and not any(key.encode() in p.read_bytes() for p in logs)


def test_a_worker_killed_mid_run_exits_4_with_its_sessions_and_the_completed_records(
        cluster, tmp_path):
    records, out = tmp_path / "r.jsonl", tmp_path / "killed.json"
    printed = (tmp_path / "stdout.txt").open("w")
    proc = subprocess.Popen([*WL, "run", *AGENT, "--salt", "kill", "--sessions",
                             "2", "--workers", "2", "--ray", cluster, "--no-viz",
                             "--records", str(records), "--output", str(out)],
                            stdout=printed, stderr=subprocess.PIPE, text=True)
    try:
        victim, seen = kill_after(records, session="main#1", completed=3)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        printed.close()
    assert proc.returncode == 4, err[-3000:]
    lost_line = [x for x in (tmp_path / "stdout.txt").read_text().splitlines() if "LOST" in x]
    assert len(lost_line) == 1 and "died" in lost_line[0], lost_line
    assert lost_line[0].endswith("sessions main#1 not run to their end")
    results = json.loads(out.read_text())
    assert "worker" in results["incomplete"] and "main#1" in results["incomplete"]
    assert "died" in results["incomplete"], results["incomplete"]
    lost = [w for w in results["client"]["workers"] if w.get("lost")]
    assert [w["sessions"] for w in lost] == [["main#1"]] and lost[0]["pid"] == victim
    # every record completed before the kill is in the JSONL and in the results
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    written = {r["id"]: r for r in lines if r.get("type") == "request"}
    for rid in seen:
        assert written[rid]["skipped"] is None and written[rid]["error"] is None
    by_id = {r["id"]: r for r in results["records"]}
    # every planned request, once: the plan as made again with the calibration (`$timing_tokens`
    # pads the re-reads on an engine too quick to time: more requests on a faster machine)
    planned = [r for r in lines if r.get("type") == "plan"][-1]["requests"]
    assert set(by_id) == set(written) and len(by_id) == planned
    mine = [r for r in results["records"] if r["session"] == "main#1"]
    assert all(r["skipped"].startswith("not run: worker") for r in mine
               if r["skipped"] is not None)
    # what it had sent and never recorded is sent with its outcome unknown, not "not run" (it
    # is killed right after a record, when the session's next request is already written)
    unknown = [r for r in mine if r["error"] and r["error"]["kind"] == "lost"]
    assert unknown and all(r["t_send_unix"] and r["skipped"] is None and "worker 1 died" in
                           r["error"]["message"] for r in unknown), unknown
    assert all(r["id"] not in seen for r in unknown)
    assert sum(r["skipped"] is None and not r["error"] for r in mine) >= 3
    # the other worker's session ran to its end
    assert all(r["skipped"] is None for r in results["records"] if r["session"] == "main#0")
    assert any(x.get("type") == "worker_lost" for x in lines)


def kill_after(records: Path, session: str, completed: int) -> tuple[int, list[str]]:
    """Wait for the worker holding `session` to be named in the JSONL and for `completed` of
    its records; SIGKILL its process. Output: its pid and the ids of its records seen then."""
    deadline = time.monotonic() + 120
    pid, done = None, []
    while time.monotonic() < deadline:
        lines = records.read_text().splitlines() if records.exists() else []
        rows = [json.loads(x) for x in lines if x.endswith("}")]
        pid = pid or next((r["pid"] for r in rows if r.get("type") == "worker"
                           and session in r["sessions"]), None)
        done = [r["id"] for r in rows if r.get("type") == "request" and r["session"] == session
                and r["skipped"] is None]
        if pid is not None and len(done) >= completed:
            os.kill(pid, signal.SIGKILL)
            return pid, done
        time.sleep(0.01)
    raise AssertionError(f"no {completed} records of {session} within 120 s")


def test_a_local_ray_instance_when_no_cluster_is_given(tmp_path):
    """Without `--ray` the run starts (and stops) a Ray instance of its own."""
    code, results, err = wl_run(tmp_path, "local", *ABORT, "--salt", "local",
                                "--workers", "2", "--runs", "2")
    assert code == 0, err[-2000:]
    assert len(results["client"]["workers"]) == 1  # one session: one worker, said in a note
    assert "1 worker(s) of the 2 asked for" in results["client"]["sharding_notes"][0]


def test_a_cluster_that_cannot_be_reached_is_exit_2(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = wl_run(tmp_path, "unreachable", *ABORT, "--workers", "2",
                          "--ray", f"127.0.0.1:{port}")
    assert code == 2 and f"cannot reach the Ray cluster at 127.0.0.1:{port}" in err
    assert "Traceback" not in err


def test_the_engine_address_the_workers_reach(monkeypatch):
    """On one node the engine's address stays; with other nodes the simulator is reached at
    the driver node's address, and any other engine on this machine's loopback is refused."""
    from workloadlang.scale import ScaleError, ray_run

    monkeypatch.setattr(ray_run, "other_nodes", lambda: False)
    assert ray_run.worker_url("http://127.0.0.1:8000/v1", sim=False) == "http://127.0.0.1:8000/v1"
    monkeypatch.setattr(ray_run, "other_nodes", lambda: True)
    monkeypatch.setattr(ray_run.ray.util, "get_node_ip_address", lambda: "10.0.0.5")
    assert ray_run.worker_url("http://0.0.0.0:4123/v1", sim=True) == "http://10.0.0.5:4123/v1"
    assert ray_run.worker_url("http://10.1.1.1:8000/v1", sim=False) == "http://10.1.1.1:8000/v1"
    with pytest.raises(ScaleError, match="loopback"):
        ray_run.worker_url("http://localhost:8000/v1", sim=False)


def test_a_killed_driver_leaves_what_it_received_on_disk_and_its_workers_end(cluster, tmp_path):
    records = tmp_path / "r.jsonl"
    proc = subprocess.Popen([*WL, "run", *AGENT, "--salt", "driver", "--sessions",
                             "2", "--workers", "2", "--ray", cluster, "--no-viz",
                             "--records", str(records)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            lines = records.read_text().splitlines() if records.exists() else []
            if sum('"type":"request"' in x for x in lines) >= 5:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = [json.loads(x) for x in records.read_text().splitlines()]  # every line whole
    assert sum(r.get("type") == "request" for r in rows) >= 5
    pids = [r["pid"] for r in rows if r.get("type") == "worker"]
    assert len(pids) == 2
    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids)  # Ray ended the workers of the driver that died


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
