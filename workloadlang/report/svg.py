"""The report's charts as SVG text, drawn by the project itself (no plotting library).

Input: marks in pixels (from `axes.Panel`), text, legends, a colour bar. Output: one `<svg>`
element as text, ready to be placed in the HTML as is: every piece of text escaped, ids salted
by a key unique within the page, the only references `url(#id)` to its own clip paths and
gradient. Marks of one colour and shape are one `<path>` whose sub-paths each start with an
absolute `M x,y` at a mark's centre, so a 10,000-request chart stays a few hundred kB of vector
drawing (sharp in print, no embedded images).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

FONT = 13.0  # px in the chart's own units (the report draws a chart 1,100 units wide)
INK, MUTE, SPINE, GRID = "#1f2328", "#4a4f57", "#8a8f98", "#e6e8eb"
# Hit / miss / unknown, and the overlay colours and marker shapes (one per results file).
HIT, MISS, UNKNOWN = "#2a9d5c", "#d1495b", "#9aa0a6"
RUN_COLOURS = ["#3b6fb6", "#e07b39", "#7a5195", "#2a9d8f", "#bc5090", "#58508d"]
RUN_MARKERS = ["o", "s", "^", "D", "v", "P"]
RUN_DASHES = ["-", "--", ":", "-."]
# ColorBrewer's RdYlGn: red (0) through yellow to green (1)
RDYLGN = ["#a50026", "#d73027", "#f46d43", "#fdae61", "#fee08b", "#ffffbf", "#d9ef8b",
          "#a6d96a", "#66bd63", "#1a9850", "#006837"]

# Advance widths of DejaVu Sans (the page's first font) in ems; others count 0.6. The layout
# reads them to leave room for labels; a narrower fallback font only leaves more room.
WIDTHS = {**dict.fromkeys("ijl'|", 0.28), **dict.fromkeys(".,:; ", 0.32),
          **dict.fromkeys("ft()[]-/!", 0.37), **dict.fromkeys("rI", 0.42),
          **dict.fromkeys("0123456789$", 0.64), **dict.fromkeys("mM%—", 0.95),
          **dict.fromkeys("wW#", 0.84), **dict.fromkeys("ABCDEFGHJKLNOPQRSTUVXYZ", 0.7)}


def text_width(text: str, size: float = FONT) -> float:
    """Input: one line of text and a font size. Output: its width in px, a close estimate."""
    return size * sum(WIDTHS.get(c, 0.6) for c in text)


def num(v: float) -> str:
    """A coordinate as short text: one decimal, no trailing `.0`."""
    text = f"{v:.1f}"
    text = text[:-2] if text.endswith(".0") else text
    return "0" if text == "-0" else text


def esc(text: str) -> str:
    """Text made safe for XML content and double-quoted attributes."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def dasharray(style: str, width: float) -> str:
    """Input: a line style (`-`, `--`, `:`, `-.`) and a width. Output: the `stroke-dasharray`
    attribute (empty for a solid line), its pattern scaled by the width as matplotlib's."""
    pattern = {"--": (3.7, 1.6), ":": (1, 1.65), "-.": (6.4, 1.6, 1, 1.6)}.get(style)
    if not pattern:
        return ""
    return f' stroke-dasharray="{" ".join(num(max(width, 1) * p) for p in pattern)}"'


def blend(c1: str, c2: str, t: float) -> str:
    """Input: two `#rrggbb` colours and 0..1. Output: the colour `t` of the way from c1."""
    a = [int(c1[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(c2[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


def colormap(v: float, stops: Sequence[str] = RDYLGN) -> str:
    """Input: 0..1 (clamped) and colour stops. Output: the colour at `v`, in 1 % steps."""
    v = min(1.0, max(0.0, round(v, 2))) * (len(stops) - 1)
    i = min(len(stops) - 2, int(v))
    return blend(stops[i], stops[i + 1], v - i)


# ---------------------------------------------------------------- marks


def shape(kind: str, r: float) -> str:
    """Input: a marker (`o s ^ v D P X x |`) and its radius. Output: the relative path that
    draws it around the current point (the mark's centre)."""
    q, r = num, round(r, 1)
    if kind == "o":
        return f"m{q(-r)},0a{q(r)},{q(r)} 0 1,0 {q(2 * r)},0a{q(r)},{q(r)} 0 1,0 {q(-2 * r)},0z"
    if kind == "s":
        h = 0.88 * r
        return f"m{q(-h)},{q(-h)}h{q(2 * h)}v{q(2 * h)}h{q(-2 * h)}z"
    if kind in ("^", "v"):
        s = -1 if kind == "^" else 1
        return f"m0,{q(1.2 * r * s)}l{q(1.1 * r)},{q(-1.9 * r * s)}h{q(-2.2 * r)}z"
    if kind == "D":
        d = 1.15 * r
        return f"m0,{q(-d)}l{q(d)},{q(d)}l{q(-d)},{q(d)}l{q(-d)},{q(-d)}z"
    if kind in ("P", "X"):
        return cross(r, rotated=kind == "X")
    if kind == "x":
        return f"m{q(-r)},{q(-r)}l{q(2 * r)},{q(2 * r)}m{q(-2 * r)},0l{q(2 * r)},{q(-2 * r)}"
    if kind == "|":
        return f"m0,{q(-r)}v{q(2 * r)}"
    raise ValueError(f"unknown marker {kind!r}")


def cross(r: float, rotated: bool) -> str:
    """A filled plus (`P`) or a filled x (`X`) of radius `r`, as a relative closed path."""
    w = 0.34 * r
    pts = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w),
           (-r, w), (-r, -w), (-w, -w)]
    if rotated:
        c = math.sqrt(0.5)
        pts = [((x - y) * c, (x + y) * c) for x, y in pts]
    out, px, py = [f"m{num(pts[0][0])},{num(pts[0][1])}"], pts[0][0], pts[0][1]
    for x, y in pts[1:]:
        out.append(f"l{num(x - px)},{num(y - py)}")
        px, py = x, y
    return "".join(out) + "z"


STROKED = ("x", "|")  # markers drawn with a stroke only


def marks(points: Sequence[tuple[float, float, float]], kind: str, fill: str,
          stroke: str = "", width: float = 1.0, opacity: float = 1.0) -> str:
    """Input: (x, y, radius) in px, one marker kind, its fill (for `x` and `|` the stroke) and
    edge. Output: one `<path>` drawing every mark (empty text for no points)."""
    if not points:
        return ""
    d = "".join(f"M{num(x)},{num(y)}{shape(kind, r)}" for x, y, r in points)
    if kind in STROKED:
        paint = f'fill="none" stroke="{fill}" stroke-width="{num(width)}"'
    else:
        edge = f' stroke="{stroke}" stroke-width="{num(width)}"' if stroke else ""
        paint = f'fill="{fill}"{edge}'
    alpha = f' opacity="{opacity:g}"' if opacity < 1 else ""
    return f'<path class="mk" data-marker="{kind}" {paint}{alpha} d="{d}"/>'


def polyline(points: Sequence[tuple[float, float]], colour: str, width: float = 1.5,
             style: str = "-", opacity: float = 1.0) -> str:
    """Input: (x, y) in px, a colour, width and line style. Output: one `<path>`."""
    if len(points) < 2:
        return ""
    d = "M" + "L".join(f"{num(x)},{num(y)}" for x, y in points)
    alpha = f' stroke-opacity="{opacity:g}"' if opacity < 1 else ""
    return (f'<path class="ln" fill="none" stroke="{colour}" stroke-width="{num(width)}"'
            f'{dasharray(style, width)}{alpha} stroke-linejoin="round" d="{d}"/>')


def segments(lines: Sequence[Sequence[tuple[float, float]]], colour: str, width: float = 1.0,
             opacity: float = 1.0) -> str:
    """Input: several polylines in px. Output: one `<path>` drawing them all."""
    d = "".join("M" + "L".join(f"{num(x)},{num(y)}" for x, y in ln) for ln in lines
                if len(ln) >= 2)
    if not d:
        return ""
    alpha = f' stroke-opacity="{opacity:g}"' if opacity < 1 else ""
    return (f'<path class="ln" fill="none" stroke="{colour}" stroke-width="{num(width)}"'
            f'{alpha} d="{d}"/>')


def text(x: float, y: float, content: str, size: float = FONT, anchor: str = "start",
         colour: str = INK, weight: str = "", baseline: str = "", cls: str = "") -> str:
    """One `<text>` (several lines, split at `\\n`, as `<tspan>`s) at (x, y) in px. `baseline`
    `middle` centres its line on y, `hanging` hangs it from y; otherwise y is the first
    baseline (a tick label's x or y is its tick's, exactly)."""
    lines = content.split("\n")
    if baseline == "middle":
        y -= 0.6 * size * (len(lines) - 1)
    attrs = (f'x="{num(x)}" y="{num(y)}" font-size="{num(size)}" fill="{colour}"'
             + (f' text-anchor="{anchor}"' if anchor != "start" else "")
             + (f' dominant-baseline="{"central" if baseline == "middle" else baseline}"'
                if baseline else "")
             + (f' font-weight="{weight}"' if weight else "")
             + (f' class="{cls}"' if cls else ""))
    if len(lines) == 1:
        return f"<text {attrs}>{esc(content)}</text>"
    spans = "".join(f'<tspan x="{num(x)}" dy="{num(0 if i == 0 else 1.2 * size)}">'
                    f"{esc(line)}</tspan>" for i, line in enumerate(lines))
    return f"<text {attrs}>{spans}</text>"


# ---------------------------------------------------------------- legends


@dataclass(frozen=True)
class Entry:
    """One legend entry: a mark (`dot`), a line, or text alone (`note`)."""

    kind: str
    colour: str
    label: str
    marker: str = "o"
    hollow: bool = False
    r: float = 4.5
    style: str = "-"
    width: float = 1.5


def dot(colour: str, label: str, marker: str = "o", hollow: bool = False,
        r: float = 4.5) -> Entry:
    """A legend entry for a mark."""
    return Entry("dot", colour, label, marker=marker, hollow=hollow, r=r)


def line(colour: str, label: str, style: str = "-", width: float = 1.5,
         marker: str = "") -> Entry:
    """A legend entry for a line (threshold, mean, run), with a mark on it when `marker`."""
    return Entry("line", colour, label, marker=marker, style=style, width=width, r=3.5)


def note(label: str) -> Entry:
    """A legend entry of text alone."""
    return Entry("note", "", label)


SWATCH = 26.0  # px before an entry's text


def legend_columns(entries: Sequence[Entry], ncols: int) -> list[list[Entry]]:
    """Entries split into at most `ncols` columns, filled down first (as matplotlib)."""
    ncols = max(1, min(ncols, len(entries)))
    rows = math.ceil(len(entries) / ncols)
    return [list(entries[c * rows:(c + 1) * rows]) for c in range(ncols)
            if entries[c * rows:(c + 1) * rows]]


def legend_size(entries: Sequence[Entry], ncols: int = 1,
                size: float = FONT - 1) -> tuple[float, float]:
    """Input: entries, columns and font size. Output: (width, height) of the legend in px."""
    cols = legend_columns(entries, ncols)
    widths = [max(text_width(e.label, size) + (0 if e.kind == "note" else SWATCH) for e in c)
              for c in cols]
    rows = max((len(c) for c in cols), default=0)
    return sum(widths) + 14 * (len(cols) - 1) + 8, rows * 1.45 * size + 6


def swatch(e: Entry, x: float, y: float) -> str:
    """The mark or line of one entry, centred at (x + 10, y)."""
    if e.kind == "line":
        mark = marks([(x + 10, y, e.r)], e.marker, e.colour) if e.marker else ""
        return polyline([(x, y), (x + 20, y)], e.colour, e.width, e.style) + mark
    if e.kind == "dot":
        fill = "white" if e.hollow else e.colour
        return marks([(x + 10, y, e.r)], e.marker, e.colour if e.marker in STROKED else fill,
                     e.colour if e.hollow or e.marker in STROKED else "", 1.2 if e.hollow else 2)
    return ""


def legend(entries: Sequence[Entry], x: float, y: float, ncols: int = 1,
           size: float = FONT - 1, backdrop: bool = False) -> str:
    """Input: entries, the legend's top-left corner in px, columns. Output: `<g>` of it (over a
    translucent white box when `backdrop`, for a legend inside a panel)."""
    w, h = legend_size(entries, ncols, size)
    out = ['<g class="legend">']
    if backdrop:
        out.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" '
                   f'fill="white" fill-opacity="0.8"/>')
    cx = x + 4
    for col in legend_columns(entries, ncols):
        for i, e in enumerate(col):
            cy = y + 3 + (i + 0.5) * 1.45 * size
            tx = cx if e.kind == "note" else cx + SWATCH
            out += [swatch(e, cx, cy), text(tx, cy, e.label, size, colour=INK, baseline="middle")]
        cx += max(text_width(e.label, size) + (0 if e.kind == "note" else SWATCH)
                  for e in col) + 14
    return "".join(out) + "</g>"


# ---------------------------------------------------------------- the figure


PanelT = TypeVar("PanelT")


def constant(text: str) -> Callable[[str], str]:
    """Output: a function of the chart's key that gives `text` whatever the key."""
    return lambda _key: text


@dataclass
class Canvas:
    """A chart's drawing surface, `width` x `height` px. Panels (`axes.Panel`) and free items
    (text, legends, a colour bar) are added to it; `render` writes the `<svg>`."""

    width: float
    height: float
    font: float = FONT
    panels: list[Any] = field(default_factory=list)  # `axes.Panel`s (axes imports this module)
    items: list[Callable[[str], str]] = field(default_factory=list)
    aligned: list[list[Any]] = field(default_factory=list)

    def add(self, panel: PanelT) -> PanelT:
        """Add an `axes.Panel`; output: the panel."""
        self.panels.append(panel)
        return panel

    def align(self, panels: Sequence[Any]) -> None:
        """Give these panels the same left and right margins (panels stacked on one x axis)."""
        self.aligned.append(list(panels))

    def draw(self, item: str | Callable[[str], str]) -> None:
        """Add SVG text (or a function of the chart's key that makes it) drawn over the panels."""
        self.items.append(item if callable(item) else constant(item))

    def render(self, key: str, title: str) -> str:
        """Input: a page-unique key and an accessible title. Output: `<svg ...>...</svg>`."""
        margins = {id(p): p.margins() for p in self.panels}
        for group in self.aligned:
            left = max(margins[id(p)][0] for p in group)
            right = max(margins[id(p)][1] for p in group)
            for p in group:
                margins[id(p)] = (left, right, *margins[id(p)][2:])
        body = [p.render(f"{key}-{i}", margins[id(p)]) for i, p in enumerate(self.panels)]
        body += [item(key) for item in self.items]
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {num(self.width)} '
                f'{num(self.height)}" width="{num(self.width)}" height="{num(self.height)}" '
                f'role="img" aria-label="{esc(title)}" class="chart-svg" data-key="{esc(key)}" '
                f'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">'
                + "".join(body) + "</svg>")


def colorbar(x: float, y: float, w: float, ticks: Sequence[tuple[float, str]], label: str,
             stops: Sequence[str] = RDYLGN, h: float = 11.0,
             size: float = FONT - 1) -> Callable[[str], str]:
    """A horizontal colour bar at (x, y), `w` wide, ticks at 0..1 fractions of it, the label
    under them. Output: a function of the chart's key (its gradient's id is salted by it)."""

    def draw(key: str) -> str:
        gid = f"{key}-grad"
        grad = "".join(f'<stop offset="{k / (len(stops) - 1):.3f}" stop-color="{c}"/>'
                       for k, c in enumerate(stops))
        out = [f'<g class="colorbar"><defs><linearGradient id="{gid}">{grad}</linearGradient>'
               f'</defs><rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" '
               f'fill="url(#{gid})" stroke="{SPINE}" stroke-width="0.8"/>']
        for v, lab in ticks:
            tx = x + v * w
            out.append(f'<path stroke="{SPINE}" d="M{num(tx)},{num(y + h)}v4"/>')
            out.append(text(tx, y + h + 5, lab, size, "middle", MUTE, baseline="hanging"))
        out.append(text(x + w / 2, y + h + 8 + 1.3 * size, label, size + 1, "middle",
                        baseline="hanging"))
        return "".join(out) + "</g>"

    return draw
