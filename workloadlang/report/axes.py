"""One chart panel: its axes (linear or log scales, ticks, labels), its marks, its legend.

Input: marks in data coordinates, added by the chart code (`workloadlang.report.charts`);
limits, formatters and labels set on `Panel.x` and `Panel.y`. Output, when the canvas renders
it (`svg.Canvas`): the margins its labels need, then a `<g class="panel">` placed in its box.
The axes autoscale to the marks with a 5 % margin unless a limit is set; ticks fall on round
numbers (1, 2, 2.5, 5 times a power of ten; decades on a log scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloadlang.report import svg

Point = tuple[float, float]


def finite(v: Any) -> bool:
    """Is `v` a number that can be drawn (not None, NaN or infinite)?"""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---------------------------------------------------------------- tick labels


def plain(step: float) -> Callable[[float], str]:
    """A formatter for ticks `step` apart: as many decimals as the step needs, thousands
    separated (`0.25`, `1,500`)."""
    decimals = next((d for d in range(10) if abs(round(step, d) - step) <= 1e-9 * step), 10)
    return lambda v: f"{v:,.{decimals}f}"


def percent(v: float) -> str:
    """A fraction as a percentage tick: `0.25` -> `25%`, `0.125` -> `12.5%`."""
    return f"{v * 100:.3g}%" if abs(v * 100 - round(v * 100)) > 1e-6 else f"{v * 100:.0f}%"


def tokens(v: float) -> str:
    """Ticks in tokens: `950`, `50k`, `1.2M`."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.0f}"


def seconds(v: float) -> str:
    """A log-axis tick in seconds: `50µs`, `2ms`, `1.5s`."""
    if v < 1e-3:
        return f"{v * 1e6:.3g}µs"
    return f"{v * 1e3:.3g}ms" if v < 1 else f"{v:.3g}s"


# ---------------------------------------------------------------- ticks


def nice_step(span: float, nbins: int, integer: bool) -> float:
    """The smallest round step (1, 2, 2.5 or 5 times a power of ten) that cuts `span` into at
    most `nbins` parts; a whole number when `integer`."""
    raw = span / max(1, nbins)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if integer and (step < 1 or abs(step - round(step)) > 1e-9):
            continue
        if step >= raw * (1 - 1e-9):
            return step
    return 10 * mag


def linear_ticks(lo: float, hi: float, nbins: int = 8, integer: bool = False) -> list[float]:
    """Input: limits. Output: the round values between them (inclusive)."""
    step = nice_step(hi - lo, nbins, integer)
    first = math.ceil(lo / step - 1e-9)
    out = []
    k = first
    while k * step <= hi + 1e-9 * step:
        out.append(round(k * step, 12))
        k += 1
    return out


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[float]]:
    """Input: positive limits. Output: (labelled ticks, unlabelled minor ticks): every decade,
    plus 2 and 5 times each decade when the range spans fewer than two."""
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    major = [10.0 ** d for d in range(d0, d1 + 1) if lo <= 10.0 ** d <= hi]
    minor = [m * 10.0 ** d for d in range(d0, d1 + 1) for m in range(2, 10)
             if lo <= m * 10.0 ** d <= hi]
    if len(major) < 2:
        major = sorted(major + [v for v in minor if round(v / 10 ** math.floor(math.log10(v)))
                                in (2, 5)])
    return major, [v for v in minor if v not in major]


# ---------------------------------------------------------------- an axis


@dataclass
class Axis:
    """One axis of a panel: scale, limits (None: from the marks), label, tick formatter, fixed
    ticks (value, text) for categories, whether ticks are whole numbers, inversion."""

    scale: str = "linear"
    lo: float | None = None
    hi: float | None = None
    label: str = ""
    fmt: Callable[[float], str] | None = None
    integer: bool = False
    inverted: bool = False
    fixed: list[tuple[float, str]] | None = None
    nbins: int = 8
    labels: bool = True  # tick labels shown (off on the upper of two panels sharing x)

    def limits(self, values: Sequence[float]) -> tuple[float, float]:
        """Input: the marks' values on this axis. Output: (lo, hi), the set limits or the
        data's range with a 5 % margin (multiplicative on a log scale)."""
        vals = [v for v in values if finite(v) and (self.scale != "log" or v > 0)]
        if self.fixed:
            vals += [v for v, _ in self.fixed]
        if self.scale == "log":
            logs = [math.log10(v) for v in vals] or [0.0, 1.0]
            a, b = min(logs), max(logs)
            a, b = (a - 0.5, b + 0.5) if a == b else (a - 0.05 * (b - a), b + 0.05 * (b - a))
            lo = self.lo if self.lo is not None else 10 ** a
            hi = self.hi if self.hi is not None else 10 ** b
            return lo, hi
        a, b = (min(vals), max(vals)) if vals else (0.0, 1.0)
        pad = 0.05 * (b - a) if b > a else (0.5 if a == 0 else 0.05 * abs(a))
        lo = self.lo if self.lo is not None else a - pad
        hi = self.hi if self.hi is not None else b + pad
        if hi <= lo:
            hi = lo + 1
        return lo, hi

    def ticks(self, lo: float, hi: float) -> tuple[list[tuple[float, str]], list[float]]:
        """Input: limits. Output: (labelled ticks as (value, text), minor tick values)."""
        if self.fixed is not None:
            return [(v, t) for v, t in self.fixed if lo <= v <= hi], []
        if self.scale == "log":
            major, minor = log_ticks(lo, hi)
            fmt = self.fmt or (lambda v: f"{v:g}")
            return [(v, fmt(v)) for v in major], minor
        values = linear_ticks(lo, hi, self.nbins, self.integer)
        step = values[1] - values[0] if len(values) > 1 else 1.0
        fmt = self.fmt or plain(step)
        return [(v, fmt(v)) for v in values], []


@dataclass
class Scale:
    """Data to px on one axis: `lo..hi` onto `p0..p1` (linear or log)."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            a, b, v = math.log10(self.lo), math.log10(self.hi), math.log10(v)
        else:
            a, b = self.lo, self.hi
        return self.p0 + (v - a) / (b - a) * (self.p1 - self.p0)

    def inside(self, v: float) -> bool:
        """Can `v` be placed (positive on a log scale)?"""
        return finite(v) and (not self.log or v > 0)


# ---------------------------------------------------------------- marks


@dataclass
class Mark:
    """A mark in data coordinates: `xs`/`ys` count for autoscaling; `draw(X, Y)` is its SVG."""

    xs: list[float]
    ys: list[float]
    draw: Callable[[Scale, Scale], str]
    points: Callable[[Scale, Scale], list[Point]] = lambda X, Y: []
    clip: bool = True


TICK, PAD, TITLE = 4.0, 4.0, 14.0


@dataclass
class Panel:
    """An axes in `box` (x, y, w, h: px on the canvas, labels included)."""

    box: tuple[float, float, float, float]
    font: float = svg.FONT
    title: str = ""
    x: Axis = field(default_factory=Axis)
    y: Axis = field(default_factory=Axis)
    marks: list[Mark] = field(default_factory=list)
    right: list[tuple[float, str, str]] = field(default_factory=list)  # y, text, colour
    legends: list[tuple[list[svg.Entry], str, int]] = field(default_factory=list)
    edge: list[tuple[float, str]] = field(default_factory=list)  # y, colour
    grid_y: bool = True

    # ------------------------------------------------------------ adding marks

    def line(self, xs: Sequence[Any], ys: Sequence[Any], colour: str, width: float = 1.5,
             style: str = "-", opacity: float = 1.0, step: bool = False) -> None:
        """A line through the points that can be drawn (`step`: a step after each point)."""
        pts = [(x, y) for x, y in zip(xs, ys) if finite(x) and finite(y)]

        def to_px(X: Scale, Y: Scale) -> list[Point]:
            out = [(X(x), Y(y)) for x, y in pts if X.inside(x) and Y.inside(y)]
            if step:
                out = [p for a, b in zip(out, out[1:]) for p in (a, (b[0], a[1]))] + out[-1:]
            return out

        self.marks.append(Mark([p[0] for p in pts], [p[1] for p in pts],
                               lambda X, Y: svg.polyline(to_px(X, Y), colour, width, style,
                                                         opacity),
                               lambda X, Y: along(to_px(X, Y))))

    def lines(self, runs: Sequence[Sequence[Point]], colour: str, width: float = 1.0,
              opacity: float = 1.0) -> None:
        """Several lines of one colour as one path (a line per run)."""
        runs = [[(x, y) for x, y in run if finite(x) and finite(y)] for run in runs]
        self.marks.append(Mark(
            [x for run in runs for x, _ in run], [y for run in runs for _, y in run],
            lambda X, Y: svg.segments([[(X(x), Y(y)) for x, y in run] for run in runs],
                                      colour, width, opacity)))

    def scatter(self, xs: Sequence[Any], ys: Sequence[Any], colours: str | Sequence[str],
                r: float | Sequence[float] = 4.0, marker: str = "o", edge: str = "",
                width: float = 1.0, hollow: bool = False, clip: bool = True) -> None:
        """Marks at (x, y): a colour (fill; the edge when `hollow`) and radius (px) each or for
        all; points that cannot be drawn are left out. One path per colour."""
        n = len(xs)
        cs = [colours] * n if isinstance(colours, str) else list(colours)
        rs = [r] * n if isinstance(r, (int, float)) else list(r)
        keep = [k for k in range(n) if finite(xs[k]) and finite(ys[k])]

        def draw(X: Scale, Y: Scale) -> str:
            groups: dict[str, list[tuple[float, float, float]]] = {}
            for k in keep:
                if X.inside(xs[k]) and Y.inside(ys[k]):
                    groups.setdefault(cs[k], []).append((X(xs[k]), Y(ys[k]), rs[k]))
            if hollow:
                return "".join(svg.marks(p, marker, "white", c, width) for c, p in groups.items())
            return "".join(svg.marks(p, marker, c, edge, width) for c, p in groups.items())

        self.marks.append(Mark([xs[k] for k in keep], [ys[k] for k in keep], draw,
                               lambda X, Y: [(X(xs[k]), Y(ys[k])) for k in keep], clip))

    def hline(self, y: float, colour: str, style: str = "-", width: float = 1.0) -> None:
        """A horizontal line across the panel at data `y`."""
        self.marks.append(Mark([], [y], lambda X, Y: svg.polyline(
            [(X.p0, Y(y)), (X.p1, Y(y))], colour, width, style)))

    def vline(self, x: float, colour: str, style: str = "-", width: float = 1.0) -> None:
        """A vertical line across the panel at data `x`."""
        self.marks.append(Mark([x], [], lambda X, Y: svg.polyline(
            [(X(x), Y.p0), (X(x), Y.p1)], colour, width, style)))

    def spans(self, ys: Sequence[float], x0s: Sequence[float], x1s: Sequence[float],
              colour: str, width: float) -> None:
        """Horizontal bars from x0 to x1 at each y (a request's duration in its lane)."""
        rows = [(y, a, b) for y, a, b in zip(ys, x0s, x1s) if finite(a) and finite(b)]
        self.marks.append(Mark(
            [v for _, a, b in rows for v in (a, b)], [y for y, _, _ in rows],
            lambda X, Y: svg.segments([[(X(a), Y(y)), (X(b), Y(y))] for y, a, b in rows],
                                      colour, width)))

    def note(self, x: float, y: float, content: str, colour: str = svg.INK,
             anchor: str = "start", dx: float = 0.0, dy: float = 0.0, x_data: bool = True,
             y_data: bool = False, size: float | None = None, baseline: str = "") -> None:
        """Text at (x, y): each coordinate in data units or as a fraction of the plot area
        (`x_data`, `y_data`; 0 is its left and bottom edge, 1 its right and top edge, whichever
        way the axis runs), moved by (dx, dy) px; drawn unclipped, over the legends."""

        def draw(X: Scale, Y: Scale) -> str:
            px = X(x) if x_data else min(X.p0, X.p1) + x * abs(X.p1 - X.p0)
            py = Y(y) if y_data else max(Y.p0, Y.p1) - y * abs(Y.p1 - Y.p0)
            return svg.text(px + dx, py + dy, content, size or self.font - 1, anchor, colour,
                            baseline=baseline)

        self.marks.append(Mark([], [], draw, clip=False))

    def edge_marks(self, ys: Sequence[float], colours: Sequence[str]) -> None:
        """A small square in its colour just right of the plot area at each y (a lane's
        verdict, when there are too many lanes to name)."""
        self.edge = list(zip(ys, colours))

    def legend(self, entries: Sequence[svg.Entry], loc: str = "best", ncols: int = 1) -> None:
        """A legend inside the panel: `upper left`, `upper right`, `lower left`, `lower right`
        or `best` (of those and the centres of the edges and the panel, the place over the
        fewest marks and line points)."""
        self.legends.append((list(entries), loc, ncols))

    # ------------------------------------------------------------ layout and drawing

    def limits(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """Output: the x and y limits."""
        return (self.x.limits([v for m in self.marks for v in m.xs]),
                self.y.limits([v for m in self.marks for v in m.ys]))

    def margins(self) -> tuple[float, float, float, float]:
        """Output: (left, right, top, bottom) px the tick labels, axis labels and title need
        around the plot area inside the box."""
        (xlo, xhi), (ylo, yhi) = self.limits()
        f = self.font - 1
        yt = [t for _, t in self.y.ticks(ylo, yhi)[0]] if self.y.labels else []
        left = TICK + PAD + max((svg.text_width(t, f) for t in yt), default=0) + 4
        left += 1.4 * self.font + PAD if self.y.label else 0
        xt = self.x.ticks(xlo, xhi)[0]
        overhang = svg.text_width(xt[-1][1], f) / 2 if xt and self.x.labels else 0
        right = max(8.0, overhang, 14.0 if self.edge else 0.0,
                    max((svg.text_width(t, f) + 10 for _, t, _ in self.right), default=0))
        top = TITLE + 1.2 * self.font if self.title else 8.0
        bottom = (TICK + PAD + 1.2 * f) if self.x.labels else 4.0
        bottom += 1.4 * self.font if self.x.label else 0
        return left, right, top, bottom

    def render(self, key: str, margins: tuple[float, float, float, float]) -> str:
        """Input: a page-unique key for its clip path and the margins. Output: `<g>` of it."""
        bx, by, bw, bh = self.box
        left, right, top, bottom = margins
        x0, x1, y0, y1 = bx + left, bx + bw - right, by + top, by + bh - bottom
        (xlo, xhi), (ylo, yhi) = self.limits()
        X = Scale(xlo, xhi, x1 if self.x.inverted else x0, x0 if self.x.inverted else x1,
                  self.x.scale == "log")
        Y = Scale(ylo, yhi, y0 if self.y.inverted else y1, y1 if self.y.inverted else y0,
                  self.y.scale == "log")
        clip = f"{key}-clip"
        out = [f'<g class="panel"><defs><clipPath id="{clip}"><rect x="{svg.num(x0)}" '
               f'y="{svg.num(y0 - 1)}" width="{svg.num(x1 - x0)}" height="{svg.num(y1 - y0 + 2)}"'
               f'/></clipPath></defs>', self.grid(X, Y)]
        out.append(f'<g class="marks" clip-path="url(#{clip})">'
                   + "".join(m.draw(X, Y) for m in self.marks if m.clip) + "</g>")
        out += [self.axes(X, Y), self.right_labels(X, Y)]
        if self.title:
            out.append(svg.text(x0, by + TITLE, self.title, self.font + 0.5, weight="bold"))
        out += [self.place_legend(e, loc, n, X, Y) for e, loc, n in self.legends]
        out += [m.draw(X, Y) for m in self.marks if not m.clip]
        return "".join(out) + "</g>"

    def grid(self, X: Scale, Y: Scale) -> str:
        """The light grid at the major ticks."""
        xs = [X(v) for v, _ in self.x.ticks(X.lo, X.hi)[0]]
        ys = [Y(v) for v, _ in self.y.ticks(Y.lo, Y.hi)[0]] if self.grid_y else []
        lines = [[(x, Y.p0), (x, Y.p1)] for x in xs] + [[(X.p0, y), (X.p1, y)] for y in ys]
        return f'<g class="grid">{svg.segments(lines, svg.GRID, 0.8)}</g>'

    def axes(self, X: Scale, Y: Scale) -> str:
        """Spines (left and bottom), ticks, tick labels and axis labels."""
        f = self.font - 1
        xl, yb = min(X.p0, X.p1), max(Y.p0, Y.p1)
        out = [svg.polyline([(xl, min(Y.p0, Y.p1)), (xl, yb), (max(X.p0, X.p1), yb)],
                            svg.SPINE, 0.9)]
        xt, xminor = self.x.ticks(X.lo, X.hi)
        yt, yminor = self.y.ticks(Y.lo, Y.hi)
        ticks = [[(X(v), yb), (X(v), yb + TICK)] for v, _ in xt]
        ticks += [[(X(v), yb), (X(v), yb + TICK / 2)] for v in xminor]
        ticks += [[(xl, Y(v)), (xl - TICK, Y(v))] for v, _ in yt]
        ticks += [[(xl, Y(v)), (xl - TICK / 2, Y(v))] for v in yminor]
        out.append(svg.segments(ticks, svg.SPINE, 0.9))
        xa = ['<g class="xaxis">']
        if self.x.labels:
            xa += [svg.text(X(v), yb + TICK + PAD, t, f, "middle", svg.MUTE, baseline="hanging")
                   for v, t in xt]
        if self.x.label:
            xa.append(svg.text((X.p0 + X.p1) / 2, self.box[1] + self.box[3] - 4, self.x.label,
                               self.font, "middle"))
        ya = ['<g class="yaxis">']
        if self.y.labels:
            ya += [svg.text(xl - TICK - PAD, Y(v), t, f, "end", svg.MUTE, baseline="middle")
                   for v, t in yt]
        if self.y.label:
            cx, cy = self.box[0] + self.font, (Y.p0 + Y.p1) / 2
            ya.append(f'<g transform="translate({svg.num(cx)},{svg.num(cy)}) rotate(-90)">'
                      + svg.text(0, 0, self.y.label, self.font, "middle") + "</g>")
        return "".join(out + xa + ["</g>"] + ya + ["</g>"])

    def right_labels(self, X: Scale, Y: Scale) -> str:
        """Labels (or squares) on the right of the plot area, each at its y in its colour."""
        x = max(X.p0, X.p1) + 8
        groups: dict[str, list[tuple[float, float, float]]] = {}
        for y, c in self.edge:
            groups.setdefault(c, []).append((x - 2, Y(y), 2.4))
        return ("".join(svg.text(x, Y(y), t, self.font - 1, colour=c, baseline="middle",
                                 cls="right") for y, t, c in self.right)
                + "".join(svg.marks(p, "s", c) for c, p in groups.items()))

    def place_legend(self, entries: list[svg.Entry], loc: str, ncols: int, X: Scale,
                     Y: Scale) -> str:
        """A legend in the plot area, at `loc` (`best`: over the fewest marks)."""
        w, h = svg.legend_size(entries, ncols, self.font - 1.5)
        x0, x1 = sorted((X.p0, X.p1))
        y0, y1 = sorted((Y.p0, Y.p1))
        cx, cy, right, low = (x0 + x1 - w) / 2, (y0 + y1 - h) / 2, x1 - w - 4, y1 - h - 4
        # matplotlib's order: on a tie `best` takes the first
        places = {"upper right": (right, y0 + 2), "upper left": (x0 + 4, y0 + 2),
                  "lower left": (x0 + 4, low), "lower right": (right, low),
                  "center left": (x0 + 4, cy), "center right": (right, cy),
                  "lower center": (cx, low), "upper center": (cx, y0 + 2), "center": (cx, cy)}
        if loc == "best":
            pts = [p for m in self.marks for p in m.points(X, Y)]
            loc = min(places, key=lambda c: covered(pts, *places[c], w, h))
        lx, ly = places[loc]
        return svg.legend(entries, lx, ly, ncols, self.font - 1.5, backdrop=True)


def along(points: Sequence[Point], each: int = 6) -> list[Point]:
    """Points along a polyline: its vertices and `each - 1` between every two (what a legend
    placed over the line would hide)."""
    out = list(points[:1])
    for (ax, ay), (bx, by) in zip(points, points[1:]):
        out += [(ax + (bx - ax) * k / each, ay + (by - ay) * k / each) for k in range(1, each + 1)]
    return out


def covered(points: Sequence[Point], x: float, y: float, w: float, h: float) -> int:
    """How many of the points (px) fall in the box at (x, y) of size w x h."""
    return sum(x <= px <= x + w and y <= py <= y + h for px, py in points)
