"""Matplotlib figures to inline SVG, and the report's chart style.

Input: a `matplotlib.figure.Figure` and a key unique within the page. Output: one `<svg>` element
as text (no XML prolog, no metadata, ids salted by the key so two charts never share an id),
ready to be placed in the HTML as is. Text stays text (`svg.fonttype: none`): small, selectable,
searchable, drawn in the page's sans-serif font. Dense marks are rasterised by the chart code
into an embedded PNG (a `data:` URI), which keeps 10,000-request charts small.
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib
from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

# A quiet look: no box, light grid, one sans-serif family, colours that survive greyscale print.
STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.edgecolor": "#8a8f98",
    "axes.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e6e8eb",
    "grid.linewidth": 0.7,
    "xtick.color": "#4a4f57",
    "ytick.color": "#4a4f57",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "svg.fonttype": "none",
    "text.parse_math": False,  # a `$` in a session name or verdict is just a dollar sign
    "figure.dpi": 100,
    "savefig.dpi": 96,  # the resolution of rasterised marks (only dense charts have any)
}

# Hit / miss / unknown, and the overlay colours (one per results file).
HIT, MISS, UNKNOWN = "#2a9d5c", "#d1495b", "#9aa0a6"
RUN_COLOURS = ["#3b6fb6", "#e07b39", "#7a5195", "#2a9d8f", "#bc5090", "#58508d"]
RUN_MARKERS = ["o", "s", "^", "D", "v", "P"]
RASTER_ABOVE = 1500  # marks in one collection above which they are drawn as a PNG

def new_figure(width: float, height: float) -> Figure:
    """Input: size in inches. Output: a pyplot-free `Figure` in the report style, laid out
    with the constrained layout engine."""
    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(width, height), layout="constrained")


def styled(fn):
    """Decorator: run a chart-drawing function inside the report style."""

    def wrapper(*a, **kw):
        with matplotlib.rc_context(STYLE):
            return fn(*a, **kw)

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def to_svg(fig: Figure, key: str, title: str = "") -> str:
    """Input: a figure, a page-unique key and an accessible title. Output: `<svg ...>...</svg>`."""
    buf = io.StringIO()
    for ax in fig.axes:  # marks are clipped to their axes: the layout need not measure them
        for artist in [*ax.collections, *ax.lines, *ax.images]:
            artist.set_in_layout(False)
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": f"wl-{key}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None,
                                                 "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = drop_unreferenced_ids(text)
    aria = f' role="img" aria-label="{escape_attr(title)}" class="chart-svg" data-key="{key}"'
    return text.replace("<svg", "<svg" + aria, 1)


def drop_unreferenced_ids(text: str) -> str:
    """Remove matplotlib's group ids (`figure_1`, `axes_1`, ...) that nothing points to: they
    would repeat in every chart of the page. Referenced ids (clip paths, markers) are hashed
    with the salt and stay."""
    used = set(re.findall(r"#([A-Za-z_][\w.-]*)", text))
    return re.sub(r' id="([^"]+)"', lambda m: m.group(0) if m.group(1) in used else "", text)


def escape_attr(s: str) -> str:
    """Text made safe for a double-quoted XML attribute."""
    return (s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def tokens_label(x: float, _pos: Any = None) -> str:
    """Axis ticks in tokens: `950`, `50k`, `1.2M`."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:.3g}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.3g}k"
    return f"{x:.0f}"
