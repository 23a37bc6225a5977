"""`wl run`'s sharded-run options (workloadlang.scale.workers): without `--workers` nothing of
Ray is imported; with it and no Ray installed, a message naming the extra and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workloadlang.cli.main import main

RUN = """
import sys
{before}
from workloadlang.cli.main import main
code = main(sys.argv[1:])
print("RAY-IMPORTED" if "ray" in sys.modules else "RAY-NOT-IMPORTED")
print("SCALE:" + ",".join(sorted(m for m in sys.modules if m.startswith("workloadlang.scale"))))
sys.exit(code)
"""


def run(args: list[str], before: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN.format(before=before), *args],
                          capture_output=True, text=True, timeout=300)


def test_a_run_without_workers_imports_nothing_of_ray():
    proc = run(["run", "abort-sim", "--sim", "--no-viz", "--salt", "r", "--context-tokens", "2k",
                "--thinking-tokens", "50", "--settle", "100ms"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RAY-NOT-IMPORTED" in proc.stdout
    # of the sharded run only `wl run`'s options: no driver, shard, coordinator or Ray actor
    assert "SCALE:workloadlang.scale,workloadlang.scale.workers\n" in proc.stdout


def test_workers_without_ray_installed_name_the_extra_and_exit_2():
    # `import ray` fails as it does where Ray is not installed
    proc = run(["run", "abort-sim", "--sim", "--no-viz", "--workers", "2"],
               before="sys.modules['ray'] = None")
    assert proc.returncode == 2
    assert "pip install 'workloadlang[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "simulator:" not in proc.stderr  # refused before anything started


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "must be at least 1"),
    (["--workers", "two"], "expected a number of workers"),
    (["--ray", "127.0.0.1:6379"], "--ray needs --workers N"),
])
def test_bad_scale_options_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        code = main(["run", "abort-sim", "--sim", "--no-viz", *args])
        raise SystemExit(code)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
