"""The report of sweeps: each headline number drawn against the swept value.

Input: `SweepResults` of one workload and param (several overlay: one line each, e.g. two
engines), with their labels. Output: one self-contained HTML page: a table of the points (the
exit code and the gates each failed), then a chart per number that varies: the report items,
hits and misses, mean reuse, TTFT, the engine's hit ratio (`sweepresults.curves`). The page carries
the single-run report's Content-Security-Policy (`render.CSP`: no script, nothing loaded).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from workloadlang.report.axes import Axis, Panel
from workloadlang.report.render import CSP
from workloadlang.report.svg import RUN_COLOURS, RUN_MARKERS, Canvas, line

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse}}
td,th{{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}} th{{background:#f4f5f7}}
.charts{{display:flex;flex-wrap:wrap;gap:16px}} .chart{{width:420px}}
.fail{{color:#b3261e;font-weight:bold}}</style></head>
<body><h1>{title}</h1><p>{what}</p>{found}{tables}<h2>Against {param}</h2>
<div class="charts">{charts}</div></body></html>
"""


class SweepReportError(ValueError):
    """Sweeps that cannot share a page (different workloads or params)."""


def render_sweep_html(sweeps: Sequence[Any], labels: Sequence[str]) -> str:
    """Input: sweeps of one workload and param, and their labels. Output: the HTML page."""
    first = sweeps[0]
    for s in sweeps[1:]:
        if (s.workload, s.param) != (first.workload, first.param):
            raise SweepReportError(f"sweeps of {first.workload} over {first.param} and of "
                                   f"{s.workload} over {s.param} do not share a page")
    from workloadlang import sweepresults

    tables = "".join(points_table(s, label) for s, label in zip(sweeps, labels))
    names = list(dict.fromkeys(n for s in sweeps for n in sweepresults.curves(s)))
    charts = []
    for i, name in enumerate(names):
        series = [(label, s.values, sweepresults.curves(s).get(name, ("", []))[1])
                  for s, label in zip(sweeps, labels)]
        if any(len({repr(v) for v in ys}) > 1 for _, _, ys in series):  # only what varies
            charts.append(f'<div class="chart">{chart(name, first.param, series, i)}</div>')
    return PAGE.format(csp=CSP, title=html.escape(f"{first.workload}: sweep of {first.param}"),
                       what=html.escape(", ".join(f"{label}: {len(s.points)} runs"
                                                  for s, label in zip(sweeps, labels))),
                       tables=tables, param=html.escape(first.param),
                       found="".join(f"<p><strong>{html.escape(label)}: "
                                     f"{html.escape(sweepresults.search_line(s) or '')}"
                                     "</strong></p>"
                                     for s, label in zip(sweeps, labels) if s.search),
                       charts="".join(charts) or "<p>no number varies across the points</p>")


def points_table(s: Any, label: str) -> str:
    """The points: value, exit code, gates failed, requests, plan; for a rate search also
    whether each sustained its load."""
    from workloadlang.ratesearch import sustained

    rows = []
    for value, res in zip(s.values, s.points):
        failed = [g.name for g in res.gates if g.status == "fail" and g.severity == "fail"]
        cls = ' class="fail"' if res.exit_code else ""
        kept = f"<td>{'yes' if sustained(res) else 'no'}</td>" if s.search else ""
        rows.append(f"<tr><td>{html.escape(value)}</td>{kept}<td{cls}>{res.exit_code}</td>"
                    f"<td>{html.escape(', '.join(failed) or '–')}</td>"
                    f"<td>{len(res.records)}</td><td>{html.escape(res.plan_hash)}</td></tr>")
    return (f"<h2>{html.escape(label)}</h2><table><tr><th>{html.escape(s.param)}</th>"
            + ("<th>sustained</th>" if s.search else "")
            + "<th>exit</th><th>gates failed</th><th>requests</th><th>plan</th></tr>"
            + "".join(rows) + "</table>")


def chart(name: str, param: str, series: list[tuple[str, list[str], list[Any]]],
          key: int) -> str:
    """One number against the swept value: a line per sweep (numeric values on a numeric
    axis, others in their order). Output: the `<svg>`."""
    c = Canvas(420, 260, font=11)
    p = c.add(Panel((0, 0, 420, 260), font=11, title=name, x=Axis(label=param)))
    handles = []
    for j, (label, values, ys) in enumerate(series):
        given = [number(v) for v in values]
        xs: list[float] = [x for x in given if x is not None]
        if len(xs) < len(given):
            xs = [float(i) for i in range(len(values))]
            p.x.fixed = list(zip(xs, values))
        pts = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float))
               and not isinstance(y, bool)]
        colour, marker = RUN_COLOURS[j % len(RUN_COLOURS)], RUN_MARKERS[j % len(RUN_MARKERS)]
        if pts:
            p.line([q[0] for q in pts], [q[1] for q in pts], colour)
            p.scatter([q[0] for q in pts], [q[1] for q in pts], colour, 3.5, marker)
        handles.append(line(colour, label, marker=marker))
    if len(series) > 1:
        p.legend(handles)
    return c.render(f"sweep-{key}", f"{name} against {param}")


def number(text: str) -> float | None:
    """A swept value on a numeric axis (`8k` is 8000, `500ms` 0.5), or None."""
    from workloadlang.evaluate import split_number

    found = split_number(text.lstrip("-"))
    if found is None:
        return None
    return -found[0] if text.startswith("-") else found[0]
