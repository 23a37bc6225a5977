"""Run `wl run` in-process, the way a user does, and read back its results JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workloadlang.cli.main import main


def wl_run(tmp_path: Path, workload: str, *args: str) -> tuple[int, dict[str, Any]]:
    """Exit code and the `--output` JSON of `wl run WORKLOAD ARGS --no-viz`."""
    out = tmp_path / f"{workload}-{len(list(tmp_path.iterdir()))}.json"
    code = main(["run", workload, "--no-viz", "--output", str(out), *args])
    return code, json.loads(out.read_text()) if out.exists() else {}


def wl_run_text(tmp_path: Path, text: str, *args: str) -> tuple[int, dict[str, Any]]:
    """`wl run` of a workload given as text (written to `w.wl`), records to `r.jsonl`."""
    wl = tmp_path / "w.wl"
    wl.write_text(text)
    return wl_run(tmp_path, str(wl), "--records", str(tmp_path / "r.jsonl"), *args)


def verdicts(results: dict[str, Any]) -> dict[str, str]:
    return results["verdicts"]


def gate(results: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in results["gates"] if g["name"] == name)


def records(results: dict[str, Any], label: str) -> list[dict[str, Any]]:
    return [r for r in results["records"] if r["label"] == label]
