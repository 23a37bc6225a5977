"""`wl run` (a real process, started by a small launcher that reports its peak memory) against a
hostile loopback engine (tests/faultserver.py): whatever the engine sends, every request ends
with a recorded error kind (or its impossible counts set aside), the run with the exit code
docs/cli.md documents, the client's peak RSS stays under 200 MB, no traceback is printed, and
the API key is in no file and no output. `python bench/fuzz.py --engine` runs the same engines
at 100 MB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import hostile
from faultserver import FaultServer

KEY = "sk-hostile-0123456789abcdef"
PEAK_MB = 200
WORKLOAD = """
workload hostile {
  timeout = 30s
  session s repeat 2 {
    turn first { user "hello"; reply 8 }
    turn second { user "again"; reply 8 }
  }
  gates { served: overall all(hit{second}) }
}
"""

# fault -> (exit code, what each request's record holds: an error kind, or "impossible")
ENGINES: dict[str, tuple[int, str, dict[str, str]]] = {
    "cached_over": (6, "impossible", {}),         # was a 100 % HIT and a PASS
    "cached_negative": (6, "impossible", {}),     # was "-555.6 % reuse", a MISS
    "prompt_huge": (6, "impossible", {}),
    "completion_negative": (6, "impossible", {}),
    "flood": (4, "overrun", {"x-tokens": "300000"}),             # ~20 MB for max_tokens 8
    "fat_tokens": (4, "overrun", {"x-tokens": "400", "x-bytes": "65536"}),
    "huge_json": (4, "overrun", {"x-bytes": str(40 << 20)}),
    "no_newline": (4, "overrun", {"x-bytes": str(40 << 20)}),
    "stall_body": (4, "idle", {}),
}


# a stalled body waits for the idle timeout: shorter than the 1 s the other engines get
STALL_IDLE = ("--idle-timeout", "0.5")


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


@pytest.fixture(scope="module")
def engine_runs(fault_server: FaultServer,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`of(fault)`: the run against the engine of `ENGINES[fault]`, made on first use and
    shared by the tests that only read what it left (the files and the process's output)."""
    made: dict[str, tuple[hostile.Measured, list[Path]]] = {}

    def of(fault: str) -> tuple[hostile.Measured, list[Path]]:
        if fault not in made:
            _, kind, opts = ENGINES[fault]
            fault_server.reset()
            fault_server.defaults = {"x-fault": fault, **opts}
            made[fault] = run(tmp_path_factory.mktemp(fault), fault_server,
                              *(STALL_IDLE if kind == "idle" else ()))
        return made[fault]

    return of


def run(tmp_path: Path, server: FaultServer, *extra: str) -> tuple[hostile.Measured, list[Path]]:
    wl = tmp_path / "w.wl"
    wl.write_text(WORKLOAD)
    files = [tmp_path / "out.json", tmp_path / "r.jsonl", tmp_path / "report.html"]
    proc = hostile.measured("run", str(wl), "--base-url", server.base_url, "--no-viz",
                            "--api-key", KEY, "--idle-timeout", "1", "--salt", "s",
                            "--output", str(files[0]), "--records", str(files[1]),
                            "--report", str(files[2]), *extra, timeout=120)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert proc.peak_mb < PEAK_MB, f"{proc.peak_mb:.0f} MB"
    return proc, files


def no_key_anywhere(proc: hostile.Measured, files: list[Path]) -> None:
    """Neither the key nor any run of 8 of its characters (its tail: the engine echoed the
    last 10) in the terminal's output, the JSON, the JSONL or the HTML."""
    texts = [proc.stdout, proc.stderr] + [f.read_text() for f in files if f.exists()]
    for text in texts:
        assert not any(KEY[i:i + 8] in text for i in range(len(KEY) - 7))


@pytest.mark.parametrize("fault", list(ENGINES))
def test_a_hostile_engine_ends_in_a_recorded_kind_and_a_documented_exit(engine_runs: Any,
                                                                         fault: str) -> None:
    code, kind, _ = ENGINES[fault]
    proc, files = engine_runs(fault)
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:], proc.stdout[-2000:])
    results = json.loads(files[0].read_text())
    lines = [json.loads(x) for x in files[1].read_text().splitlines()]
    records = [x for x in lines if x["type"] == "request"]
    assert len(records) == len(results["records"]) == 4
    for rec in (*records, *results["records"]):
        if kind == "impossible":
            assert rec["impossible"] and rec["error"] is None
            assert rec["cached_tokens"] is None and rec["hit"] is None and rec["reuse"] is None
        else:
            assert rec["error"]["kind"] == kind, rec["error"]
    if kind == "impossible":
        assert results["impossible"] == 4 and lines[-1]["impossible"] == 4
        assert "IMPOSSIBLE" in proc.stdout and "counts no engine can" in proc.stdout
        assert "impossible counts" in files[2].read_text()
        assert results["gates"][0]["status"] != "pass"
    no_key_anywhere(proc, files)


def test_a_flood_is_cut_soon_after_the_budget(engine_runs: Any) -> None:
    assert ENGINES["flood"][2] == {"x-tokens": "300000"}  # ~20 MB for max_tokens 8
    proc, files = engine_runs("flood")
    for rec in json.loads(files[0].read_text())["records"]:
        assert rec["streamed_tokens"] <= 2 * 8 + 256 + 1  # `token_budget(8)`, then cut


def test_a_stall_is_cut_by_the_idle_timeout_not_the_deadline(engine_runs: Any) -> None:
    proc, files = engine_runs("stall_body")  # with STALL_IDLE
    for rec in json.loads(files[0].read_text())["records"]:
        assert rec["error"]["kind"] == "idle" and 0.45 < rec["e2e_s"] < 5, rec  # deadline: 30 s


def test_an_echoed_key_is_in_no_file(tmp_path: Path, server: FaultServer) -> None:
    server.defaults = {"x-fault": "echo_key"}
    server.models_echo_key = True  # the model id is the key, too
    proc, files = run(tmp_path, server)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    results = json.loads(files[0].read_text())
    assert results["engine"]["model"] == "Bearer [redacted]"
    excerpts = [r["reply_excerpt"] for r in results["records"]]
    assert all("[redacted]" in e for e in excerpts), excerpts
    no_key_anywhere(proc, files)
    # the engine still got it: the key is redacted where it is written, not where it is sent
    assert all(KEY in r["headers"]["authorization"] for r in server.chat_requests())


def test_a_huge_models_answer_is_refused(tmp_path: Path, server: FaultServer) -> None:
    server.models_bytes = 40 << 20
    proc, files = run(tmp_path, server)
    assert proc.returncode == 3 and "over" in proc.stderr and "bytes" in proc.stderr
    assert server.chat_requests() == [] and not any(f.exists() for f in files[:1])


def test_every_engine_behaviour_is_covered() -> None:
    from faultserver import HOSTILE

    assert set(HOSTILE) - {"echo_key"} == set(ENGINES)
