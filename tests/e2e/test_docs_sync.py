"""The reference docs and the code stay in step: every flag `wl` accepts is in docs/cli.md,
every exit code is in docs/cli.md and the README, every diagnostic code the code can emit has
its section in docs/diagnostics.md (and no section is for a code nothing emits), every module
of the package has its room in docs/architecture.md (and every room is there once).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from workloadlang.cli import build_parser
from workloadlang.results import ExitCode

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
DIAGNOSTICS_MD = (ROOT / "docs" / "diagnostics.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE_MD = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def subcommands(parser: argparse.ArgumentParser, prefix: str = "wl"):
    """(name, parser) for every command and nested subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from subcommands(sub, f"{prefix} {name}")


def test_every_flag_is_documented():
    missing = []
    for name, parser in subcommands(build_parser()):
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help" and flag not in CLI_MD:
                    missing.append(f"{name} {flag}")
    assert not missing, f"not in docs/cli.md: {missing}"


def test_every_simulator_flag_of_wl_run_has_a_row():
    run = dict(subcommands(build_parser()))["wl run"]
    flags = [f for a in run._actions for f in a.option_strings if f.startswith("--sim-")]
    assert len(flags) > 10
    for flag in flags:
        assert re.search(rf"^\| `{re.escape(flag)}", CLI_MD, re.M), flag


def test_every_exit_code_is_documented():
    codes = {int(c) for c in ExitCode}
    table = set(re.findall(r"^\| (\d+) \|", CLI_MD, re.M))
    assert {str(c) for c in codes} <= table, (codes, table)
    readme = re.search(r"Exit codes: (.*?)\(\[docs/cli.md\]", README, re.S).group(1)
    for code in codes:
        assert re.search(rf"\b{code} ", readme), code


def emitted_codes() -> set[str]:
    found = set()
    for path in (ROOT / "workloadlang").rglob("*.py"):
        found |= set(re.findall(r"\"(WL\d{3})\"", path.read_text(encoding="utf-8")))
    return found


def test_every_diagnostic_code_has_a_section():
    documented = set(re.findall(r"^### (WL\d{3})\b", DIAGNOSTICS_MD, re.M))
    emitted = emitted_codes()
    assert emitted - documented == set(), "emitted but not in docs/diagnostics.md"
    assert documented - emitted == set(), "documented but never emitted"


def test_the_performance_page_stays_short():
    """docs/performance.md is read whole: under 250 lines (condense, do not append)."""
    lines = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, len(lines)


def rooms_table() -> list[str]:
    """The rows of docs/architecture.md's table of rooms."""
    section = ARCHITECTURE_MD.split("\n## Rooms\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_every_module_has_its_room_and_every_room_is_there_once():
    rows = rooms_table()
    rooms = [row.split(" | ")[0] for row in rows]
    assert len(rooms) == len(set(rooms)), sorted(r for r in rooms if rooms.count(r) > 1)
    text = "\n".join(rows)
    package = ROOT / "workloadlang"
    missing = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py") and f"`{p.name}`" not in text]
    assert not missing, f"modules without a room in docs/architecture.md: {missing}"
