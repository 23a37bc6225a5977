"""The `.wl` text behind a results file, to quote a gate's line next to its verdict.

Input: `Results.source` (a path, or a bundled name such as `abort-sim.wl`) and the workload name.
Output: the file's lines (1-based dict), or an empty dict when the file cannot be found or is not
that workload (a results file travels without its `.wl`; the report then shows line numbers only).
"""

from __future__ import annotations

import re
from pathlib import Path


def workload_lines(source: str, workload: str) -> dict[int, str]:
    """Input: a source name and the workload's name. Output: {line number: text}, or {}."""
    text = read_source(source)
    if text is None or not re.search(rf"\bworkload\s+{re.escape(workload)}\b", text):
        return {}
    return {i + 1: line for i, line in enumerate(text.splitlines())}


def read_source(source: str) -> str | None:
    """The text of a `.wl` path, else of the bundled workload of that name, else None."""
    if not source:
        return None
    try:
        p = Path(source)
        if p.is_file():
            return p.read_text(encoding="utf-8")
        from workloadlang.resources import bundled_workload_path

        bundled = bundled_workload_path(Path(source).name)
        return bundled.read_text(encoding="utf-8") if bundled is not None else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
