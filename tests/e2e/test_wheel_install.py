"""The installed wheel: build it, `pip install` it into a fresh virtual environment, and use the
installed `wl` from outside the repository.

tests/language/test_parse_resources.py already checks the wheel's file list by unpacking it onto
sys.path; this goes the whole way a user does: a real `pip install` of the wheel (its declared
dependencies resolved, offline, against the test environment's installed packages, which the new
venv sees through a .pth file), the console script, every bundled workload checked, one planned,
and the grammar and workloads read from inside the installed package, not from the checkout; and
the lean install: the wheel's dependencies hold no plotting stack and stay under 80 MB, and a
run's report draws its charts with nothing imported beyond them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import site
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

from workloadlang.cli.main import main as wl_main
from workloadlang.resources import bundled_workloads

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = [name for name, _ in bundled_workloads()]
pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and a cwd outside the checkout: only the installed copy can be imported.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh venv with the wheel built from this checkout installed.

    The venv gets no pip and no dependencies of its own: a .pth file appends this environment's
    site-packages (pip, lark, httpx, ...) to its sys.path. A path line in a .pth is not scanned
    for further .pth files, so the checkout's editable-install hook stays out, and the venv's
    own site-packages, where the wheel goes, comes first. `--no-index` makes pip resolve the
    wheel's declared dependencies against what is installed, and fail if one is missing."""
    tmp = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                 str(tmp / "dist"), str(ROOT)], cwd=tmp)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("workloadlang-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False, clear=True).create(env_dir)
    bin_dir = env_dir / "bin"
    purelib = run([str(bin_dir / "python"), "-c",
                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp)
    assert purelib.returncode == 0, purelib.stderr
    (Path(purelib.stdout.strip()) / "outer_site_packages.pth").write_text(
        "".join(f"{path}\n" for path in site.getsitepackages()), encoding="utf-8")
    pip = run([str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check",
               "--no-index", "-q", str(wheel)], cwd=tmp, timeout=900)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    return bin_dir


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    assert ROOT not in tmp_path.parents
    return tmp_path


def test_installed_package_is_the_wheel_not_the_checkout(installed: Path, outside: Path):
    script = ("import workloadlang, workloadlang.resources as r\n"
              "print(workloadlang.__file__)\n"
              "print(r._data_dir('grammars'))\n"
              "print(r._data_dir('workloads'))\n"
              "print(len(r.read_grammar()))\n")
    r = run([str(installed / "python"), "-c", script], cwd=outside)
    assert r.returncode == 0, r.stderr
    package, grammars, workloads, grammar_len = r.stdout.splitlines()
    site = installed.parent / "lib"
    for path in (package, grammars, workloads):
        assert Path(path).resolve().is_relative_to(site.resolve()), path
        assert not Path(path).resolve().is_relative_to(ROOT), path
    assert grammars.endswith(os.path.join("workloadlang", "_data", "grammars"))
    grammar = (ROOT / "grammars" / "workload.lark").read_text(encoding="utf-8")
    assert int(grammar_len) == len(grammar)


def test_installed_wl_plans_agent_sim_like_the_checkout(installed: Path, outside: Path):
    r = run([str(installed / "wl"), "plan", "agent-sim", "--salt", "x"], cwd=outside)
    assert r.returncode == 0, r.stderr
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        assert wl_main(["plan", "agent-sim", "--salt", "x"]) == 0
    assert r.stdout == here.getvalue()
    assert r.stdout.startswith("workload agent_sim: ") and "salt x · plan " in r.stdout


def test_installed_wl_checks_every_bundled_workload(installed: Path, outside: Path):
    r = run([str(installed / "wl"), "check", *BUNDLED], cwd=outside)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{name}.wl: ok" for name in BUNDLED]
    listed = run([str(installed / "wl"), "list"], cwd=outside)
    assert listed.returncode == 0
    benchmarks = listed.stdout.split("\n\n", 1)[0]  # wl probe's experiments follow
    assert [line.split()[0] for line in benchmarks.splitlines()[2:]
            if line and not line[0].isspace()] == BUNDLED


def test_installed_wl_reports_errors_without_a_traceback(installed: Path, outside: Path):
    bad = outside / "bad.wl"
    bad.write_text("workload w {\n  sesion main { }\n}\n", encoding="utf-8")
    r = run([str(installed / "wl"), "check", str(bad)], cwd=outside)
    assert r.returncode == 2
    assert f"{bad}:2:3: error[" in r.stderr and "^" in r.stderr
    assert "Traceback" not in r.stderr


def test_installed_wl_runs_a_benchmark_on_its_simulator_process(installed: Path, outside: Path):
    """`wl run --sim` from the wheel: the simulator's child process imports the installed
    package too (nothing from the checkout), and the run completes and passes."""
    out = outside / "r.json"
    r = run([str(installed / "wl"), "run", "agent-sim", "--sim", "--no-viz", "--sessions", "1",
             "--main-tokens", "2k", "--step-tokens", "500", "--sub-tokens", "500",
             "--finalize-tokens", "300", "--output", str(out),
             # a context whose cold prefill takes long enough for timing to tell a recompute
             "--sim-prefill-us-per-token", "40"], cwd=outside)
    assert r.returncode == 0, r.stderr
    assert "simulator: http://127.0.0.1:" in r.stderr and "Traceback" not in r.stderr
    assert json.loads(out.read_text())["records"]


# ---------------------------------------------------------------- a lean install

PLOTTING = {"matplotlib", "numpy", "pillow", "fonttools", "kiwisolver", "contourpy", "pyparsing",
            "cycler", "python-dateutil"}
LEAN_MB = 80  # what `pip install .` (no extras) may put in a fresh venv's site-packages


def requires(dist: metadata.Distribution, extras: tuple[str, ...] = ("",)) -> list[str]:
    """The names of what a distribution requires on this machine, with the given extras."""
    from packaging.requirements import Requirement

    out = []
    for line in dist.requires or ():
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            out.append(canonical(req.name))
    return out


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def closure(names: list[str]) -> set[str]:
    """Every distribution the named ones pull in (from this environment's metadata)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += requires(metadata.distribution(name))
    return seen


def size_on_disk(name: str) -> int:
    """Bytes (disk blocks) of an installed distribution's files, from its RECORD."""
    total = 0
    for f in metadata.distribution(name).files or ():
        path = Path(str(f.locate()))
        if path.is_file():
            total += path.stat().st_blocks * 512
    return total


@pytest.fixture(scope="module")
def wheel_dist(installed: Path) -> metadata.Distribution:
    """The installed wheel's own metadata."""
    site = installed.parent / "lib"
    (info,) = site.glob("python3*/site-packages/workloadlang-*.dist-info")
    return metadata.PathDistribution(info)


def test_the_wheel_needs_no_plotting_stack_and_installs_lean(wheel_dist):
    """The wheel's own dependencies (no extras) hold nothing of matplotlib's stack, and they,
    the package and the pip a fresh venv starts with stay under 80 MB on disk
    (bench/install_size.py measures a real `pip install .`)."""
    deps = closure(requires(wheel_dist))
    assert not deps & PLOTTING, deps & PLOTTING
    assert {"lark", "pydantic", "jinja2", "starlette"} <= deps
    own = sum(Path(str(f.locate())).stat().st_blocks * 512 for f in wheel_dist.files or ()
              if Path(str(f.locate())).is_file())
    total = own + sum(size_on_disk(n) for n in deps | {"pip"})
    assert total < LEAN_MB * 1e6, f"{total / 1e6:.1f} MB"


def test_installed_wl_reports_charts_with_only_its_own_dependencies(installed: Path,
                                                                    outside: Path, wheel_dist):
    """`wl run --sim --report` from the wheel draws every chart with the plotting stack out of
    reach (importing it fails), and imports nothing outside the wheel's declared dependencies."""
    out, page = outside / "r.json", outside / "r.html"
    script = ("import json, sys\n"
              f"for name in {sorted(['matplotlib', 'numpy', 'PIL'])!r}:\n"
              "    sys.modules[name] = None  # import fails\n"
              "from workloadlang.cli.main import main\n"
              "code = main(sys.argv[1:])\n"
              "from importlib.metadata import packages_distributions\n"
              "found = packages_distributions()\n"
              "used = {d for m, mod in list(sys.modules.items()) if mod is not None\n"
              "        for d in found.get(m.split('.')[0], [])}\n"
              "print(json.dumps({'code': code, 'used': sorted(used)}))\n")
    r = run([str(installed / "python"), "-c", script, "run", "agent-sim", "--sim", "--no-viz",
             "--sessions", "2", "--main-tokens", "2k", "--step-tokens", "500", "--sub-tokens",
             "500", "--finalize-tokens", "300", "--sim-prefill-us-per-token", "40",
             "--output", str(out), "--report", str(page)], cwd=outside)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    done = json.loads(r.stdout.strip().splitlines()[-1])
    assert done["code"] == 0
    allowed = closure(requires(wheel_dist)) | {"workloadlang"}
    assert {canonical(d) for d in done["used"]} <= allowed
    html = page.read_text(encoding="utf-8")
    keys = re.findall(r'data-chart="(\w+)"', html)
    assert {"sessions", "speed", "latency"} <= set(keys), keys
    assert html.count("<svg") == len(keys) and 'class="mk"' in html
