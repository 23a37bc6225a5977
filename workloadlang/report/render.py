"""Results -> one self-contained HTML page.

Input: `Results` objects of the same workload (one per results file) and their labels.
Output: the HTML text: header, gates first, one chart per benchmark kind the records hold,
replies checked, and the evidence table. Everything comes from jinja2 with autoescape on; the
only markup inserted unescaped is the charts' SVG (`svg.py`, which escapes every text it
writes). A strict Content-Security-Policy forbids scripts and any load but inline styles and
`data:` images.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from workloadlang.report import data, tables
from workloadlang.report.source import read_source, workload_lines

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class ReportError(Exception):
    """Results that cannot go into one report (different workloads, none at all)."""


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment over the package's templates, autoescaping everything. One per
    process: it keeps the compiled templates (compiling the report's took ~70 ms a page)."""
    folder = Path(__file__).with_name("templates")
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined)


def run_labels(runs: Sequence[Any], names: Sequence[str] | None = None) -> list[str]:
    """Input: the runs and optional names (file stems). Output: distinct labels, one per run."""
    if names is None:
        names = [(r.engine.model or "run") if len(runs) == 1
                 else f"run {i + 1} ({r.started_at})" for i, r in enumerate(runs)]
    out: list[str] = []
    for n in names:
        label, k = n, 2
        while label in out:
            label, k = f"{n} ({k})", k + 1
        out.append(label)
    return out


# ---------------------------------------------------------------- chart selection


def reuse_threshold(res: Any) -> float | None:
    """The threshold of the gate that reads `reuse{...}` (by its `.wl` line, else its name)."""
    lines = workload_lines(res.source, res.workload)
    for g in res.gates:
        if "reuse{" in lines.get(g.line, "") or (not lines and "reuse" in g.name):
            for r in g.results:
                t = r.threshold
                if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 1:
                    return float(t)
    return None


def needle_data(res: Any) -> data.Needles | None:
    """Input: a `Results`. Output: its needles, the checked labels read from its `.wl`."""
    text = read_source(res.source) or ""
    return data.needles(res.records, data.checked_labels(text.splitlines()),
                        res.params.get("needle_pos"))


# (key, title, what it shows, extractor, chart function name)
KINDS: list[tuple[str, str, str, Callable[[Any], Any], str]] = [
    ("retention", "Retention under cache pressure",
     "TTFT and cached fraction of each context re-sent in verify order (newest first). Green is "
     "a hit, red a miss; the dashed line is the calibrated TTFT threshold; the red line marks "
     "the first miss with the capacity retained before it, the blue line where the re-sent "
     "contexts add up to the stated KV size.",
     lambda r: data.retention(r.records, r.calibration, r.params), "retention_chart"),
    ("sessions", "Sessions over time",
     "One lane per session; each request is a mark at its start time, coloured by reuse "
     "(reported cached / expected), sized by TTFT, shaped by its label; the faint bar is its "
     "duration. Hollow marks are cold requests (less than half the prompt expected from the "
     "cache, so neither hit nor miss). Verdicts are on the right.",
     lambda r: data.lanes(r.records, r.verdicts), "lanes_chart"),
    ("speed", "Speed vs context",
     "Prefill (over the uncached tokens) and generation tokens/s at each level of the "
     "conversation that grows turn by turn: a thin line per run, a thick line for the mean.",
     lambda r: data.speed(r.records), "speed_chart"),
    ("abort", "Abort and re-prompt",
     "Left: reuse of the request sent after each aborted one, against the reuse gate. Right: "
     "how far past the aborted prompt the reported cache reaches, against the expected prefix "
     "and the streamed point (the tokens streamed before the abort). When the engine reported "
     "no usage for the aborted request, its prompt is the re-prompt's less the planned growth.",
     lambda r: data.abort(r.records, reuse_threshold(r)), "abort_chart"),
    ("needles", "Needles",
     "Whether the reply contained the needle, per haystack length.",
     needle_data, "needles_chart"),
    ("theory", "Cache hit rate against theory",
     "The share of prompt tokens served from the cache, cumulative over the requests answered "
     "with a cached count in the order they were sent: as the engine reported it, and as the "
     "plan says a perfect cache (what it certainly serves, and what it could serve when "
     "requests of concurrent sessions finish first) and an LRU cache of the given size (wl run "
     "--cache-tokens) would serve, taking one request at a time. With several requests in "
     "flight they overlap: the gap is what that cost.",
     lambda r: data.theory(r.records, r.cache_theory), "theory_chart"),
    ("latency", "Latency and load",
     "Left: the share of the measured requests (for ITL: of every gap between two token "
     "events) answered at or under each latency: time to first token, inter-token latency, "
     "time per output token and end-to-end (docs/metrics.md), with p50 and p99 marked. Right: "
     "the requests of the run in flight over time.",
     data.latency, "latency_chart"),
]


@dataclass(frozen=True)
class ChartSection:
    """One chart of the page: its kind (`key`), title, caption, inline SVG, the runs it
    overlays and what it was drawn from (`data`: (label, the kind's data) per run)."""

    key: str
    title: str
    what: str
    svg: Markup
    runs: list[str]
    data: list[tuple[str, Any]]


def charts(runs: Sequence[Any], labels: Sequence[str]) -> list[ChartSection]:
    """Input: runs and labels. Output: one section per chart kind that any run's records hold,
    each with its title, caption, inline SVG and the runs it overlays."""
    from workloadlang.report import charts as ch

    out = []
    for key, title, what, extract, fn in KINDS:
        series = [(lab, d) for lab, r in zip(labels, runs) if (d := extract(r)) is not None]
        if not series:
            continue
        canvas = getattr(ch, fn)(series)
        out.append(ChartSection(key=key, title=title, what=what,
                                svg=Markup(canvas.render(key, title)),
                                runs=[s[0] for s in series], data=series))
    return out


# ---------------------------------------------------------------- the page


def context(runs: Sequence[Any], labels: Sequence[str]) -> dict[str, Any]:
    """Everything the template shows, as text (and the charts' SVG)."""
    secs = charts(runs, labels)
    needle_rows = [(lab, row) for sec in secs if sec.key == "needles"
                   for lab, d in sec.data for row in d.rows]
    return {"csp": Markup(CSP), "workload": runs[0].workload,
            "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "headers": [tables.header(r, lab) for r, lab in zip(runs, labels)],
            "labels": labels, "gates": tables.gate_rows(runs), "charts": secs,
            "needle_rows": [(lab, tables.fmt_num(row.length),
                             "found" if row.found else "not found" if row.found is False
                             else "errored", row.reply, row.error) for lab, row in needle_rows],
            "evidence": [tables.evidence(r, lab) for r, lab in zip(runs, labels)]}


def render_html(runs: Sequence[Any], labels: Sequence[str] | None = None) -> str:
    """Input: `Results` of one workload, optional labels. Output: the report's HTML text.
    Raises `ReportError` for no runs or runs of different workloads."""
    if not runs:
        raise ReportError("no results to report")
    names = {r.workload for r in runs}
    if len(names) > 1:
        raise ReportError(f"results of different workloads cannot be overlaid: "
                          f"{', '.join(sorted(names))}")
    labels = run_labels(runs, labels)
    return environment().get_template("report.html.j2").render(**context(runs, labels))
