"""A workload's params as `wl` flags, as a new user meets them: a param named like an option of
`wl plan` / `wl run` is an error in every command (WL234), `wl run FILE --help` lists the
workload's own params, and `wl check` says `ok` on stdout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workloadlang.cli.arguments import command_flags
from workloadlang.cli.main import main as wl_main

CLASH = """workload clash {
  params { %s: int = 3 }
  session s repeat $%s { user "hi"; reply 4 }
}
"""


def main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = wl_main(list(args))
    except SystemExit as e:  # argparse's --help
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", ["output", "records", "salt", "model", "sim_slots"])
@pytest.mark.parametrize("command", [["check"], ["plan"], ["run", "--sim"]])
def test_a_param_named_like_an_option_is_an_error_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        name: str, command: list[str]):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.wl").write_text(CLASH % (name, name))
    flag = "--" + name.replace("_", "-")
    extra = [] if command == ["check"] else [flag, "2"]
    code, out, err = main(capsys, command[0], "w.wl", *command[1:], *extra)
    assert code == 2
    assert f"error[WL234]: parameter `{name}` has the flag `{flag}`" in err
    assert f"rename it, e.g. `{name}_n`" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.wl"]  # no stray file `2`


def test_every_option_of_plan_and_run_is_reserved():
    flags = command_flags()
    assert {"output", "records", "salt", "report", "sweep", "time-budget", "base-url", "json",
            "param", "sim-slots", "sim-fault", "workers"} <= flags
    assert "sessions" not in flags and "kv-size" not in flags


def test_a_param_named_unlike_any_option_is_fine(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]):
    (tmp_path / "w.wl").write_text(CLASH % ("outputs", "outputs"))
    code, out, err = main(capsys, "plan", str(tmp_path / "w.wl"), "--outputs", "2", "--salt", "s")
    assert code == 0 and "params: outputs=2" in out


def test_a_param_named_help_is_an_error_at_check(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]):
    (tmp_path / "w.wl").write_text(CLASH % ("help", "help"))
    code, out, err = main(capsys, "check", str(tmp_path / "w.wl"))
    assert code == 2 and "error[WL234]: parameter `help` has the flag `--help`" in err


PARAMS = """workload flood {
  params {
    tenants: int = 40 in 1..256 doc "tenants arriving"
    rate: float = 20 doc "arrivals a second"
    mode: string = "a" one of "a", "b"
    size: tokens
  }
  session t repeat $tenants arrive every exponential(1s / $rate) {
    user filler $size, $mode; reply 4
  }
}
"""


@pytest.mark.parametrize("command", ["run", "plan"])
def test_help_after_a_workload_lists_its_params(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                command: str):
    (tmp_path / "w.wl").write_text(PARAMS)
    code, out, err = main(capsys, command, str(tmp_path / "w.wl"), "--help")
    assert code == 0
    params = out[out.index("params of "):].splitlines()
    assert params[0].startswith(f"params of {tmp_path / 'w.wl'} (each a flag, or -p NAME=VALUE")
    assert [line.split()[0] for line in params[1:]] == ["--tenants", "--rate", "--mode", "--size"]
    assert params[1].split(None, 2)[2] == "int, default 40, in 1..256: tenants arriving"
    assert params[3].split(None, 2)[2] == 'string, default "a", one of a, b'
    assert params[4].split(None, 2)[2] == "tokens, required"
    assert "--base-url" in out if command == "run" else "--full" in out


def test_help_of_a_bundled_workload_and_without_one(capsys: pytest.CaptureFixture[str]):
    code, out, _ = main(capsys, "run", "agent-sim", "-h")
    assert code == 0 and "params of agent-sim.wl" in out and "--sub-windows VALUE" in out
    code, out, _ = main(capsys, "run", "-h")
    assert code == 0 and "params of" not in out


def test_check_says_ok_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "w.wl").write_text(PARAMS)
    (tmp_path / "u.wl").write_text(PARAMS.replace('mode: string = "a" one of "a", "b"',
                                                  'mode: string = "a"\n    unused: int = 1'))
    code, out, err = main(capsys, "check", str(tmp_path / "w.wl"), str(tmp_path / "u.wl"))
    assert code == 0
    assert out.splitlines() == [f"{tmp_path / 'w.wl'}: ok", f"{tmp_path / 'u.wl'}: ok (1 warning)"]
    assert "warning[WL213]: parameter `unused` is never used" in err
