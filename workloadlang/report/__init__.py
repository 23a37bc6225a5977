"""`wl report`: results JSON files -> one self-contained HTML report with charts.

    write_report([results], "report.html")          # what `wl run --report` calls
    report_command(ReportRequest(("a.json", "b.json"), "out.html"))  # `wl report a.json b.json`

Input: `Results` (a run's summary JSON, `workloadlang.results.Results`) of one workload;
several overlay on the charts (before / after). Output: an HTML file with no scripts and no
network access needed to open it. See docs/report.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReportRequest:
    """`wl report`: the results files (of one workload; several overlay, each labelled by its
    file's name) and the HTML file to write."""

    results: tuple[str, ...]
    output: str = "report.html"


def load_results(path: str | Path) -> Any:
    """Input: a results JSON path (`wl run --output`). Output: a `Results`, or a
    `SweepResults` for a sweep's file. Raises `ResultsFileError` (a ValueError) with a
    one-line reason."""
    from workloadlang.sweepresults import read_any

    return read_any(path)


def write_report(results_list: Sequence[Any], path: str | Path,
                 labels: Sequence[str] | None = None) -> Path:
    """Input: `Results` objects of one workload, the output path, optional run labels.
    Output: the path written. Raises `ReportError` (different workloads, no results)."""
    from workloadlang.report.render import ReportError, render_html
    from workloadlang.report.sweeppage import render_sweep_html
    from workloadlang.sweepresults import SweepResults

    runs = list(results_list)
    swept = [isinstance(r, SweepResults) for r in runs]
    if all(swept) and runs:  # the curves against the swept value
        names = list(labels) if labels else [f"run {i + 1}" for i in range(len(runs))]
        try:
            html = render_sweep_html(runs, names)
        except ValueError as e:
            raise ReportError(str(e)) from None
    elif any(swept):
        raise ReportError("a sweep's results and a single run's do not share a report")
    else:
        html = render_html(runs, labels)
    out = Path(path)
    out.write_text(html, encoding="utf-8")
    return out


def report_command(request: ReportRequest) -> int:
    """`wl report RESULTS.json [...] -o report.html`. Input: the results files' paths and the
    output's. Output: exit code 0, or 2 for unreadable or mismatched results."""
    from pydantic import ValidationError

    from workloadlang.report.render import ReportError
    from workloadlang.results import ExitCode

    try:
        if any(is_card(p) for p in request.results):
            out = write_card(request.results, request.output)
        else:
            runs = [load_results(p) for p in request.results]
            out = write_report(runs, request.output, labels=[Path(p).stem for p in request.results])
    except (OSError, ValidationError, ValueError, ReportError) as e:
        print(f"wl report: error: {first_line(e)}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"report: {out} ({out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    return ExitCode.OK


def is_card(path: str | Path) -> bool:
    """True when `path` holds a cache card (`wl probe --output`): its `schema` says so."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"workloadlang.card/' in head


def write_card(paths: Sequence[str], out: str | Path) -> Path:
    """The HTML page of one cache card (`wl report card.json`). Raises `ReportError` for
    several files (a card is a page of its own; `wl probe --compare` compares two)."""
    from workloadlang.card import read_card
    from workloadlang.report.cardpage import card_page
    from workloadlang.report.render import ReportError

    if len(paths) != 1:
        raise ReportError("a cache card is a page of its own: give one (wl probe --compare A B "
                          "tells what changed between two)")
    page = Path(out)
    page.write_text(card_page(read_card(paths[0])), encoding="utf-8")
    return page


def first_line(e: Exception) -> str:
    """The first line of an error's message (pydantic's run long)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


__all__ = ["ReportRequest", "load_results", "report_command", "write_report"]
