"""Nothing measured is lost for a bad output path, and bad settings are usage errors (exit 2)
before anything is sent. `wl run` is the CLI's `main` in the test process, against the loopback
fault server; `wl sim serve` a real subprocess (a setting it failed to refuse would serve on).

- every output path (`--output`, `--records`, `--report`) is checked before the first request;
- a write that fails after the run (`/dev/full`: a full disk) prints the verdict, writes the
  file to a fallback path that stderr names, and exits 5;
- `--records` failing mid-run moves to a fallback holding every line (JsonlWriter, in process);
- `--base-url notaurl`, `--time-budget -1`/`nan`, `--salt ''`, `--max-context 0`, an
  unreadable `--engine-log`, `wl sim serve --port 99999` / `--device-tokens -1` are exit 2;
- `wl report` / `wl compare` of an empty or cut-short results file say so in one line.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from faultserver import FaultServer, run_wl, run_wl_here
from workloadlang.cli.outputs import JsonlWriter
from workloadlang.results import read_results

TINY = """
workload tiny {
  timeout = 2s
  session s repeat 2 { turn ask { user "hello"; reply 4 } }
  gates { clean: overall count(error{ask}) == 0 }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def wl_run(tmp_path: Path, server: FaultServer, *extra: str) -> Any:
    path = tmp_path / "w.wl"
    path.write_text(TINY)
    proc = run_wl_here("run", str(path), "--base-url", server.base_url, "--no-viz", "--salt",
                       "s", *extra, env={"TMPDIR": str(tmp_path)})  # fallbacks land in tmp_path
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


@pytest.mark.parametrize(("flag", "path", "says"), [
    ("--output", "{tmp}/missing/r.json", "does not exist"),
    ("--output", "{tmp}", "is a directory"),
    ("--records", "{tmp}/missing/r.jsonl", "does not exist"),
    ("--records", "{tmp}", "is a directory"),
    ("--report", "{tmp}/missing/r.html", "does not exist"),
    ("--output", "{tmp}/w.wl", "an input of this run"),
])
def test_a_bad_output_path_is_refused_before_anything_is_sent(tmp_path: Path, server: FaultServer,
                                                              flag: str, path: str, says: str):
    proc = wl_run(tmp_path, server, flag, path.format(tmp=tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and says in proc.stderr
    assert server.requests == []  # not even discovery


def test_two_flags_naming_one_file_are_refused(tmp_path: Path, server: FaultServer):
    same = str(tmp_path / "r.json")
    proc = wl_run(tmp_path, server, "--output", same, "--records", same)
    assert proc.returncode == 2 and "name the same file" in proc.stderr
    assert server.requests == []


def fallback_of(stderr: str, flag: str, folder: Path) -> Path:
    m = re.search(rf"wl run: {flag} \S+: No space left on device; written to (\S+) instead "
                  r"\(exit 5\)", stderr)
    assert m, stderr
    assert Path(m.group(1)).parent == folder  # the temp directory
    return Path(m.group(1))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_after_the_run_prints_the_verdict_and_keeps_everything(tmp_path: Path,
                                                                           server: FaultServer):
    proc = wl_run(tmp_path, server, "--output", "/dev/full", "--report", "/dev/full",
                  "--records", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 5, proc.stderr
    assert "PASS · tiny · 2 requests" in proc.stdout  # the verdict, printed all the same
    results = read_results(fallback_of(proc.stderr, "--output", tmp_path))
    assert results.exit_code == 0 and len(results.records) == 2
    assert all(r.error is None for r in results.records)
    assert "<html" in fallback_of(proc.stderr, "--report", tmp_path).read_text()[:200].lower()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_records_on_a_full_disk_go_to_a_whole_fallback(tmp_path: Path, server: FaultServer):
    proc = wl_run(tmp_path, server, "--records", "/dev/full", "--output",
                  str(tmp_path / "out.json"))
    assert proc.returncode == 5, proc.stderr
    lines = [json.loads(x) for x in fallback_of(proc.stderr, "--records", tmp_path).read_text().splitlines()]
    assert [x["type"] for x in lines][0] == "plan" and lines[-1]["type"] == "summary"
    assert sum(x["type"] == "request" for x in lines) == 2
    assert json.loads((tmp_path / "out.json").read_text())["exit_code"] == 0


class FailingAfter:
    """A file whose writes fail with ENOSPC from the `n`-th on (a disk filling up mid-run)."""

    def __init__(self, fh: Any, n: int):
        self.fh, self.n = fh, n

    def write(self, data: bytes) -> int:
        self.n -= 1
        if self.n < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def test_records_failing_mid_run_continue_in_a_fallback_with_every_line(tmp_path: Path):
    writer = JsonlWriter(tmp_path / "r.jsonl")
    writer.fh = FailingAfter(writer.fh, 3)
    for i in range(6):
        writer.write({"type": "request", "i": i})
    writer.close()
    d = writer.delivery
    assert d.flag == "--records" and d.error == os.strerror(errno.ENOSPC) and d.written
    assert [json.loads(x)["i"] for x in Path(d.written).read_text().splitlines()] == list(range(6))
    Path(d.written).unlink()


def test_a_writer_whose_path_cannot_be_opened_falls_back_at_once(tmp_path: Path):
    writer = JsonlWriter(tmp_path / "missing" / "r.jsonl")
    writer.write({"type": "plan"})
    writer.close()
    assert writer.delivery.error and Path(writer.delivery.written).read_text() == \
        '{"type":"plan"}\n'
    Path(writer.delivery.written).unlink()


@pytest.mark.parametrize(("args", "says"), [
    (("--base-url", "notaurl"), "not an http(s) URL"),
    (("--base-url", "http://127.0.0.1:99999/v1"), "Port out of range"),
    (("--time-budget", "-1"), "--time-budget"),
    (("--time-budget", "nan"), "--time-budget"),
    (("--salt", ""), "--salt"),
    (("--max-context", "0"), "--max-context"),
])
def test_bad_settings_are_usage_errors(tmp_path: Path, args: tuple[str, ...], says: str):
    path = tmp_path / "w.wl"
    path.write_text(TINY)
    proc = run_wl_here("run", str(path), "--no-viz", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_an_engine_log_that_cannot_be_read_is_refused_before_the_run(tmp_path: Path,
                                                                      server: FaultServer):
    proc = wl_run(tmp_path, server, "--engine-log", str(tmp_path))
    assert proc.returncode == 2 and "--engine-log" in proc.stderr and "directory" in proc.stderr
    assert server.requests == []


def test_an_engine_log_that_is_a_named_pipe_is_refused_before_the_run(tmp_path: Path,
                                                                     server: FaultServer):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)  # no writer: an open for reading would wait for one forever
    proc = wl_run(tmp_path, server, "--engine-log", str(fifo))
    assert proc.returncode == 2 and "--engine-log" in proc.stderr
    assert "not a regular file" in proc.stderr and server.requests == []


def test_an_engine_log_that_never_appeared_is_said(tmp_path: Path, server: FaultServer):
    proc = wl_run(tmp_path, server, "--engine-log", str(tmp_path / "later.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "engine log: cannot read" in proc.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("--port", "99999"), "--port"),
    (("--device-tokens", "-1"), "--device-tokens"),
    (("--prefill-us-per-token", "inf"), "--prefill-us-per-token"),
    (("--fault", "nonsense"), "unknown fault"),
])
def test_sim_serve_refuses_bad_options(args: tuple[str, ...], says: str):
    proc = run_wl("sim", "serve", *args, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("content", "says"), [
    ("", "is empty"),
    ('{"schema": "workloadlang.results/1", "workload": "w", "reco', "cut short"),
    ("[1, 2]", "not a JSON object"),
    ('{"schema": "other/1"}', "not a workloadlang results file"),
])
def test_report_and_compare_say_what_is_wrong_with_a_results_file(tmp_path: Path, content: str,
                                                                   says: str):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    for argv in (("report", str(bad), "-o", str(tmp_path / "r.html")),
                 ("compare", str(bad), str(bad))):
        proc = run_wl_here(*argv)
        assert proc.returncode == 2 and says in proc.stderr, (argv, proc.stderr)
        assert "validation error" not in proc.stderr and "Traceback" not in proc.stderr
