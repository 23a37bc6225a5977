"""`wl plan`, `wl list` and `wl check` as a user runs them: flags, exit codes, rendered errors.

The error cases run the installed `wl` console script in a subprocess (what a user sees, with no
traceback); the rest call `workloadlang.cli.main.main` in-process.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workloadlang.cli.main import main as wl_main
from workloadlang.resources import bundled_workloads

BUNDLED = [name for name, _ in bundled_workloads()]
WL = shutil.which("wl", path=str(Path(sys.executable).parent)) or shutil.which("wl")


def run_wl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [WL, *args] if WL else [sys.executable, "-m", "workloadlang.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60)


def main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = wl_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_rendered(err: str, code: str, line: int, source_line: str) -> None:
    """`file:line:col: error[CODE]: ...`, the numbered source line, a caret line; no traceback."""
    lines = err.splitlines()
    at = next(i for i, s in enumerate(lines) if f"error[{code}]" in s)
    assert lines[at].split(":")[1] == str(line)
    assert lines[at + 1].split("|", 1) == [f"{line:>5} ", f" {source_line}"]
    caret_col = int(lines[at].split(":")[2])
    assert lines[at + 2].split("|", 1)[1].startswith(" " + " " * (caret_col - 1) + "^")
    assert "Traceback" not in err and "__ANON" not in err


# ---------------------------------------------------------------- errors, in a subprocess


def test_wl401_out_of_range_exit_2_with_caret(tmp_path: Path):
    r = run_wl("plan", "agent-sim", "--sessions", "0", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("agent-sim.wl:8:26: error[WL401]: `sessions` = 0 is out of its "
                               "range 1..1024")
    assert_rendered(r.stderr, "WL401", 8,
                    '    sessions: int = 3 in 1..1024 doc "concurrent sessions"')
    assert "help: set --sessions between 1 and 1024" in r.stderr


def test_wl402_missing_required_exit_2_with_caret(tmp_path: Path):
    r = run_wl("plan", "cache-pressure", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert "cache-pressure.wl:9:5: error[WL402]: missing required parameter `kv_size`" in r.stderr
    assert_rendered(r.stderr, "WL402", 9, "    kv_size: tokens in 1.. doc \"advertised KV-cache "
                    "capacity in tokens (required)\"")
    assert "help: pass --kv-size N" in r.stderr


def test_wl403_unknown_param_exit_2_with_did_you_mean(tmp_path: Path):
    r = run_wl("plan", "agent-sim", "-p", "sesions=2", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error[WL403]: unknown parameter `sesions`",
                                     "   = help: did you mean `sessions` (--sessions)?"]


def test_unknown_flag_exit_2_with_did_you_mean(tmp_path: Path):
    r = run_wl("plan", "cache-pressure", "--kv-sise", "480000", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.startswith("wl plan: error: unknown parameter --kv-sise "
                               "(did you mean --kv-size?)")
    assert "--context-tokens" in r.stderr  # the list of this workload's flags


def test_wl407_names_the_flags_that_fix_it(tmp_path: Path):
    r = run_wl("plan", "perf-sim", cwd=tmp_path)
    assert r.returncode == 2
    assert_rendered(r.stderr, "WL407", 11, "    context_limit: tokens = $max_context in 1.. doc "
                    "\"grow toward this size (default: the engine's limit)\"")
    assert "pass --max-context N, or set --context-limit" in r.stderr


def test_syntax_error_in_a_file_exit_2_no_traceback(tmp_path: Path):
    bad = tmp_path / "bad.wl"
    bad.write_text("workload w {\n  session main { user \"hi\"; reply }\n}\n")
    for cmd in ("plan", "check"):
        r = run_wl(cmd, str(bad), cwd=tmp_path)
        assert r.returncode == 2, r
        assert f"{bad}:2:" in r.stderr and "error[WL1" in r.stderr and "^" in r.stderr
        assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- flags and commands, in-process


def test_every_param_is_a_flag_kv_size_480000_gives_65_contexts(capsys):
    code, out, err = main(capsys, "plan", "cache-pressure", "--kv-size", "480000", "--salt", "s",
                          "--json")
    assert code == 0, err
    plan = json.loads(out)
    n = math.ceil(480000 / (8000 + 1)) + 5
    assert n == 65 and plan["params"]["num_contexts"] == 65
    assert len([r for r in plan["requests"] if r["label"] == "ctx"]) == 65
    verify = [r["index"] for r in plan["requests"] if r["label"] == "verify"]
    assert verify == list(range(64, -1, -1))


@pytest.mark.parametrize("args", [
    ["--kv-size=480000"], ["-p", "kv_size=480000"], ["-p", "kv-size=480k"], ["--kv-size", "480k"],
])
def test_param_spellings_agree(capsys, args: list[str]):
    code, out, err = main(capsys, "plan", "cache-pressure", "--salt", "s", "--json", *args)
    assert code == 0, err
    assert json.loads(out)["params"]["kv_size"] == 480000


def test_flags_override_derived_params_and_other_flags_still_work(capsys):
    code, out, err = main(capsys, "plan", "cache-pressure", "--kv-size", "480000",
                          "--num-contexts", "3", "--context-tokens", "1k", "--salt", "s", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["params"]["num_contexts"] == 3 and plan["totals"]["requests"] == 6


def test_flag_without_value_is_a_usage_error(capsys):
    code, out, err = main(capsys, "plan", "agent-sim", "--sessions")
    assert code == 2 and out == "" and "--sessions needs a value" in err


def test_a_param_flag_is_never_taken_for_an_abbreviated_option(capsys, tmp_path: Path):
    """`--max` is this workload's param, not an abbreviation of `--max-context`."""
    wl = tmp_path / "w.wl"
    wl.write_text("workload w {\n params { max: int = 4 in 1.. }\n"
                  " session main { user \"hi\"; reply $max }\n}\n")
    code, out, err = main(capsys, "plan", str(wl), "--max", "7", "--salt", "s", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["params"] == {"max": 7} and plan["max_context"] is None
    assert plan["requests"][0]["max_tokens"] == 7


def test_salt_is_fresh_per_run_and_printed(capsys):
    hashes = set()
    for _ in range(2):
        code, out, err = main(capsys, "plan", "abort-sim", "--json")
        assert code == 0, err
        data = json.loads(out)
        assert len(data["salt"]) >= 8
        hashes.add((data["salt"], data["plan_hash"]))
    assert len(hashes) == 2
    code, out, _ = main(capsys, "plan", "abort-sim")
    assert code == 0 and "salt " in out.splitlines()[2]


def test_json_plan_is_the_whole_plan(capsys):
    code, out, _ = main(capsys, "plan", "abort-sim", "--salt", "s", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"workload", "params", "salt", "plan_hash", "requests", "messages",
                         "gates", "totals", "sessions", "phases"}
    r = data["requests"][0]
    assert set(r) >= {"id", "deps", "new_tokens", "prompt_tokens", "expected_cached", "max_tokens",
                      "abort_after", "span"}
    assert r["span"]["file"] == "abort-sim.wl" and r["abort_after"] == 500


def test_list_shows_the_bundled_with_doc_and_params(capsys):
    code, out, err = main(capsys, "list")
    assert code == 0, err
    benchmarks, probes = out.split("\n\n", 1)  # the benchmarks' table, then wl probe's
    names = [line.split()[0] for line in benchmarks.splitlines()[2:]
             if line and not line[0].isspace()]
    assert [line.split()[0] for line in probes.splitlines()[2:]
            if line and not line[0].isspace()] == ["probes/abort", "probes/capacity",
                                                   "probes/granularity", "probes/idle"]
    assert names == BUNDLED == ["abort-sim", "agent-sim", "cache-pressure", "chat-rate",
                                "coding-agent", "idle-resume", "mooncake", "needle-test", "perf-sim",
                                "shared-prompt", "tenant-flood"]
    assert "kv_size (required)" in out
    assert "Concurrent agent sessions" in out


def test_check_every_bundled_workload(capsys):
    code, out, err = main(capsys, "check", *BUNDLED)
    assert code == 0
    assert out.splitlines() == [f"{n}.wl: ok" for n in BUNDLED]


def test_unknown_workload_is_a_usage_error(capsys):
    code, out, err = main(capsys, "plan", "agent-simm")
    assert code == 2 and "no file or bundled workload named `agent-simm`" in err
    assert "agent-sim" in err


def test_wl_plan_imports_nothing_of_the_runner():
    """`wl plan` (a sweep's included) loads no HTTP client, wire client or runner module
    (but the API's light `run.errors` and `run.runoptions`): its start-up is most of its time
    (docs/performance.md, "Planning")."""
    code = ("import sys, io, contextlib\nfrom workloadlang.cli.main import main as wl_main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert wl_main(['plan', 'abort-sim', '--sweep', 'max_tokens=8,16']) == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith(('httpx', 'workloadlang.run.',"
            " 'workloadlang.wire')) and m not in ('workloadlang.run.errors',"
            " 'workloadlang.run.runoptions')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
