"""One chart per benchmark kind, overlaying every results file given, drawn as SVG.

Input: a list of `(run label, data)` pairs, the data from `workloadlang.report.data` (all of one
kind). Output: a `svg.Canvas` (its `render(key, title)` is the inline `<svg>`). Colour carries
the verdict-bearing value (hit / miss, reuse); the results file is told apart by marker shape,
line style or its own panel, named in the legend. Sizes are px of a chart 1,100 wide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from workloadlang.report.axes import Axis, Panel, linear_ticks, percent, seconds, tokens
from workloadlang.report.data import Abort, Lanes, Latency, Needles, Retention, Speed, Theory
from workloadlang.report.svg import (
    HIT,
    MISS,
    MUTE,
    RUN_COLOURS,
    RUN_DASHES,
    RUN_MARKERS,
    UNKNOWN,
    Canvas,
    Entry,
    colorbar,
    colormap,
    dot,
    legend,
    legend_size,
    line,
    note,
)

WIDTH = 1100.0
DENSE = 1500  # marks in one panel above which they are drawn smaller, without edges
BLUE, DARK = "#3b6fb6", "#4a4f57"


def hit_colour(h: bool | None) -> str:
    """Input: hit / miss / unknown. Output: green, red or grey."""
    return HIT if h else MISS if h is False else UNKNOWN


def nan(v: float | None) -> float:
    """None as NaN (a mark left out)."""
    return math.nan if v is None else v


def share_x(panels: Sequence[Panel]) -> None:
    """Give stacked panels one x range (the union of their marks'); only the lowest shows
    its tick labels."""
    xs = [v for p in panels for m in p.marks for v in m.xs]
    lo, hi = panels[0].x.limits(xs)
    for p in panels:
        p.x.lo, p.x.hi = lo, hi
    for p in panels[:-1]:
        p.x.labels = False


# ---------------------------------------------------------------- retention


def retention_chart(series: Sequence[tuple[str, Retention]]) -> Canvas:
    """TTFT (top) and cached fraction (bottom) per context in verify order, coloured hit / miss,
    with the calibrated threshold, the first miss and the point where the re-sent contexts add
    up to the stated KV size. Input: (label, Retention) per run. Output: the canvas."""
    c = Canvas(WIDTH, 620)
    top = c.add(Panel((0, 0, WIDTH, 420), title="Retention: TTFT per context, re-sent newest first"))
    bottom = c.add(Panel((0, 420, WIDTH, 200)))
    handles = [dot(HIT, "hit"), dot(MISS, "miss"), dot(UNKNOWN, "unknown / errored")]
    for i, (label, d) in enumerate(series):
        handles += retention_run(top, bottom, d, i, label if len(series) > 1 else "")
    top.y = Axis(lo=0, label="TTFT (s)")
    bottom.y = Axis(lo=0, hi=1.05, label="cached / prompt", fmt=percent, nbins=5)
    bottom.x = Axis(label="context, in verify order (1 = newest)", integer=True)
    top.x = Axis(integer=True)
    share_x([top, bottom])
    c.align([top, bottom])
    top.legend(handles, "upper left", ncols=3)
    return c


def retention_run(top: Panel, bottom: Panel, d: Retention, i: int, label: str) -> list[Entry]:
    """Draw one run's retention marks and markers; return its extra legend entries."""
    marker, style = RUN_MARKERS[i % len(RUN_MARKERS)], ["--", ":", "-.", "-"][i % 4]
    colours = [hit_colour(h) for h in d.hit]
    dense = len(d.order) > DENSE
    top.line([x for x, t in zip(d.order, d.ttft) if t is not None],
             [t for t in d.ttft if t is not None], "#c5c9cf", 0.8, RUN_DASHES[i % 4])
    top.scatter(d.order, [nan(t) for t in d.ttft], colours, 2.2 if dense else 4.2, marker)
    bottom.scatter(d.order, [nan(f) for f in d.cached_frac], colours, 2 if dense else 3.6,
                   marker)
    suffix = f" ({label})" if label else ""
    extra = [dot(DARK, label, marker=marker, hollow=True)] if label else []
    if d.threshold_s:
        top.hline(d.threshold_s, DARK, style, 1)
        extra.append(line(DARK, f"calibrated threshold {d.threshold_s:.3g} s{suffix}", style, 1))
    if d.first_miss:
        for p in (top, bottom):
            p.vline(d.first_miss, MISS, style, 1.2)
        right_half = d.first_miss > 0.6 * len(d.order)
        top.note(d.first_miss, 0.97, f"first miss #{d.first_miss}{suffix}\n{retained_text(d)}",
                 MISS, "end" if right_half else "start", dx=-6 if right_half else 6,
                 dy=36 * i, baseline="hanging")
    if d.kv_reached_at:
        for p in (top, bottom):
            p.vline(d.kv_reached_at, BLUE, style, 1.2)
        top.note(d.kv_reached_at, 0.02, f"stated KV size {tokens(d.kv_size or 0)} re-sent{suffix}",
                 BLUE, "end", dx=-6, dy=-3 - 17 * i)
    return extra


def retained_text(d: Retention) -> str:
    """`retained 57.4k tokens = 88% of the stated KV size` (or without the KV size)."""
    text = f"retained {tokens(d.retained_tokens)} tokens"
    if d.kv_size:
        text += f" = {d.retained_tokens / d.kv_size:.0%} of the stated KV size"
    return text


# ---------------------------------------------------------------- sessions over time


def lanes_chart(series: Sequence[tuple[str, Lanes]]) -> Canvas:
    """One lane per session, one mark per request at its start: colour = reuse, size = TTFT,
    shape = label, a faint bar for its duration, verdicts on the right. One panel per run.
    Input: (label, Lanes) per run. Output: the canvas."""
    heights = [120 + min(1000.0, 28.0 * len(d.sessions)) for _, d in series]
    labels = list(dict.fromkeys(lab for _, d in series for lab in d.labels))
    shapes = {lab: RUN_MARKERS[k % len(RUN_MARKERS)] for k, lab in enumerate(labels)}
    tmax = max((t for _, d in series for t in d.ttft if t is not None), default=1.0) or 1.0
    biggest = min(biggest_mark(len(d.sessions), h - 60) for h, (_, d) in zip(heights, series))
    handles = [dot(DARK, lab, marker=shapes[lab], hollow=True) for lab in labels]
    handles += [dot(UNKNOWN, "cold: little expected from the cache", hollow=True),
                dot("black", "errored / aborted", marker="x"), *size_legend(tmax, biggest)]
    ncols = min(6, len(handles))
    _, legend_h = legend_size(handles, ncols)
    c = Canvas(WIDTH, sum(heights) + 64 + legend_h)
    panels, y = [], 0.0
    for h, (label, d) in zip(heights, series):
        p = c.add(Panel((0, y, WIDTH, h),
                        title=f"Sessions over time{' — ' + label if len(series) > 1 else ''}"))
        lanes_panel(p, d, shapes, tmax, biggest)
        panels.append(p)
        y += h
    panels[-1].x.label = "start time (s since the run began)"
    share_x(panels)
    c.align(panels)
    c.draw(colorbar(WIDTH * 0.325, y + 8, WIDTH * 0.35,
                    [(v / 5, f"{20 * v}%") for v in range(6)],
                    "reuse (reported cached / expected)"))
    c.draw(legend(handles, 0, y + 62, ncols))
    return c


def ttft_radius(t: float | None, tmax: float, biggest: float = 10.5) -> float:
    """Mark radius (px) for a TTFT: its area from a dot (instant) to `biggest` (the slowest)."""
    small = min(2.2, biggest / 2.45)
    return math.sqrt(small ** 2 + (biggest ** 2 - small ** 2) * ((t or 0) / tmax) ** 0.5)


def biggest_mark(lanes: int, panel_px: float) -> float:
    """The largest mark radius that still fits its lane: at most 1.5 lane pitches across."""
    return min(10.5, 0.75 * panel_px / max(1, lanes))


def size_legend(tmax: float, biggest: float) -> list[Entry]:
    """Legend entries for two mark sizes (a tenth of the slowest TTFT, and the slowest)."""
    return [dot("#c5c9cf", f"TTFT {tmax * f:.2g} s", r=ttft_radius(tmax * f, tmax, biggest))
            for f in (0.1, 1.0)]


def lanes_panel(p: Panel, d: Lanes, shapes: dict[str, str], tmax: float,
                biggest: float) -> None:
    """Draw one run's lanes: durations, marks per label (up to `biggest`), failures, verdicts."""
    dense = len(d.t) > DENSE
    p.spans(d.lane, d.t, [t + e for t, e in zip(d.t, d.e2e)], "#d3d6db",
            1.5 if len(d.sessions) <= 40 else 0.6)
    radius = [ttft_radius(t, tmax, biggest) for t in d.ttft]
    for lab in dict.fromkeys(d.label):
        cold = [k for k, x in enumerate(d.label) if x == lab and d.reuse[k] is None]
        p.scatter([d.t[k] for k in cold], [d.lane[k] for k in cold], UNKNOWN,
                  [radius[k] for k in cold], shapes[lab], width=0.8, hollow=True)
    for lab in dict.fromkeys(d.label):
        known = [k for k, x in enumerate(d.label) if x == lab and d.reuse[k] is not None]
        p.scatter([d.t[k] for k in known], [d.lane[k] for k in known],
                  [colormap(d.reuse[k] or 0.0) for k in known], [radius[k] for k in known],
                  shapes[lab], edge="" if dense else "#30343a", width=0.5)
    bad = [k for k, f in enumerate(d.failed) if f]
    p.scatter([d.t[k] for k in bad], [d.lane[k] for k in bad], "black", 3.5, "x", width=1.3)
    lane_axis(p, d)


def lane_axis(p: Panel, d: Lanes) -> None:
    """Session names on the left, verdicts on the right (coloured squares past 40 lanes)."""
    n = len(d.sessions)
    p.grid_y = False
    if n <= 40:
        p.y = Axis(lo=-0.5, hi=n - 0.5, inverted=True,
                   fixed=[(k, s) for k, s in enumerate(d.sessions)])
        p.right = [(k, v or "–", verdict_colour(v)) for k, v in enumerate(d.verdicts)]
        return
    p.y = Axis(lo=-0.5, hi=n - 0.5, inverted=True,
               fixed=[(k, d.sessions[int(k)]) for k in linear_ticks(0, n - 1, 12, True)])
    p.edge_marks(list(range(n)), [verdict_colour(v) for v in d.verdicts])
    counts: dict[str, int] = {}
    for v in d.verdicts:
        counts[v or "–"] = counts.get(v or "–", 0) + 1
    summary = ", ".join(f"{k}: {c}" for k, c in sorted(counts.items(), key=lambda kv: -kv[1]))
    p.note(1.0, 1.0, f"verdicts (right edge) — {summary}", anchor="end", x_data=False, dy=-5)


def verdict_colour(v: str) -> str:
    """Input: a session verdict. Output: green for `ok`, grey when unjudged, else red."""
    return HIT if v == "ok" else UNKNOWN if v in ("", "unverified", "undecidable") else MISS


# ---------------------------------------------------------------- speed vs context


def speed_chart(series: Sequence[tuple[str, Speed]]) -> Canvas:
    """Prefill and generation tokens/s against the context size at each level of the grown
    label: a thin line per run, a thick line for the mean. Input: (label, Speed) per results
    file. Output: the canvas."""
    c = Canvas(WIDTH, 420)
    label = series[0][1].label
    pp, tg = (c.add(Panel((x, 0, WIDTH / 2, 420),
                          title=f"{what} speed vs context (`{label}` levels)",
                          x=Axis(fmt=tokens, label="context (prompt tokens)"),
                          y=Axis(lo=0, fmt=tokens, label="tokens / s")))
              for x, what in ((0, "Prefill"), (WIDTH / 2, "Generation")))
    handles: list[Entry] = []
    for i, (name, d) in enumerate(series):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for p, key in ((pp, "pp"), (tg, "tg")):
            speed_lines(p, d, key, colour, RUN_MARKERS[i % len(RUN_MARKERS)])
        prefix = f"{name}: " if len(series) > 1 else ""
        handles += [line(colour, f"{prefix}mean of {len(d.runs)} conversations", width=2.4),
                    line(colour, f"{prefix}each conversation", width=0.9)]
    pp.legend(handles)
    return c


def speed_lines(p: Panel, d: Speed, key: str, colour: str, marker: str) -> None:
    """Input: a panel, one file's `Speed`, `pp` or `tg`. Draws one thin line per run and the
    mean on top (with a mark per level when there are few)."""
    p.lines([[(pt.context, getattr(pt, key)) for pt in run if getattr(pt, key) is not None]
             for run in d.runs], colour, 0.9, 0.45)
    mean = [(pt.context, getattr(pt, key)) for pt in d.mean() if getattr(pt, key) is not None]
    if mean:
        xs, ys = [m[0] for m in mean], [m[1] for m in mean]
        p.line(xs, ys, colour, 2.4)
        if len(mean) < 60:
            p.scatter(xs, ys, colour, 3.2, marker)


# ---------------------------------------------------------------- abort


def abort_chart(series: Sequence[tuple[str, Abort]]) -> Canvas:
    """Left: the re-prompt's reuse per run against the gate. Right: where the cache stopped,
    in tokens past the end of the aborted request's prompt, with the streamed point (the
    tokens streamed before the abort) marked. Input: (label, Abort) per run. Output: canvas."""
    height = 320 + min(400.0, 18.0 * max(len(d.runs) for _, d in series))
    c = Canvas(WIDTH, height)
    split = WIDTH / 2.4
    left = c.add(Panel((0, 0, split, height), title="Abort: reuse of the re-prompt per run",
                       x=Axis(label="run", integer=True),
                       y=Axis(lo=0, hi=1.05, fmt=percent, label="reuse (cached / expected)")))
    right = c.add(Panel((split, 0, WIDTH - split, height),
                        title="Where the cache stopped (0 = end of the aborted prompt)",
                        x=Axis(label="tokens past the aborted request's prompt"),
                        y=Axis(label="run", integer=True, inverted=True)))
    handles = [dot(HIT, "hit"), dot(MISS, "miss"), dot(UNKNOWN, "unknown / errored")]
    for i, (label, d) in enumerate(series):
        off = (i - (len(series) - 1) / 2) * 0.18
        marker = RUN_MARKERS[i % len(RUN_MARKERS)]
        abort_reuse(left, d, off, marker)
        abort_tokens(right, d, off, marker)
        if len(series) > 1:
            handles.append(dot(DARK, label, marker=marker, hollow=True))
    for t in sorted({d.threshold for _, d in series if d.threshold is not None}):
        left.hline(t, DARK, "--", 1)
        handles.append(line(DARK, f"gate: reuse ≥ {t:.0%}", "--", 1))
    left.legend(handles, "lower left")
    right.vline(0, "#8a8f98", "-", 1)
    right.legend([dot(DARK, "reported cached"), dot(DARK, "expected (perfect cache)", hollow=True),
                  dot(BLUE, "streamed point (tokens streamed before the abort)", marker="|", r=8)])
    return c


def abort_reuse(p: Panel, d: Abort, off: float, marker: str) -> None:
    """Reuse per run, coloured hit / miss."""
    dense = len(d.runs) > DENSE
    p.scatter([r.run + off for r in d.runs], [nan(r.reuse) for r in d.runs],
              [hit_colour(r.hit) for r in d.runs], 2 if dense else 4.7, marker)


def abort_tokens(p: Panel, d: Abort, off: float, marker: str) -> None:
    """Per run (a row): reported cached (filled) and expected (hollow) tokens past the aborted
    prompt's end, and the streamed point (a bar)."""
    runs = [r for r in d.runs if r.prime_prompt is not None]
    k = 0.4 if len(runs) > DENSE else 1.0
    p.scatter([r.streamed for r in runs], [r.run + off for r in runs], BLUE, 11 * k, "|",
              width=2 * k)
    exp = [(r, r.expected) for r in runs if r.expected is not None]
    p.scatter([e - (r.prime_prompt or 0) for r, e in exp], [r.run + off for r, _ in exp],
              DARK, 5.4 * k, marker, hollow=True)
    got = [(r, r.cached) for r in runs if r.cached is not None]
    p.scatter([c - (r.prime_prompt or 0) for r, c in got], [r.run + off for r, _ in got],
              [hit_colour(r.hit) for r, _ in got], 4.2 * k, marker)


# ---------------------------------------------------------------- needles


def needles_chart(series: Sequence[tuple[str, Needles]]) -> Canvas:
    """Found / not found per haystack length, one row per run (with its needle depth).
    Input: (label, Needles) per run. Output: the canvas."""
    handles = [dot(HIT, "found"), dot(MISS, "not found", marker="X"),
               dot(UNKNOWN, "errored", marker="D")]
    lw, _ = legend_size(handles)
    height = 160 + 45 * len(series)
    c = Canvas(WIDTH, height)
    names = []
    p = c.add(Panel((0, 0, WIDTH - lw - 16, height), title="Needles: found or not per length",
                    x=Axis(fmt=tokens, label="haystack length (prompt tokens)")))
    for i, (label, d) in enumerate(series):
        depth = f" (needle at {d.depth:.0%})" if d.depth is not None else ""
        names.append(f"{label}{depth}" if len(series) > 1 else f"found?{depth}")
        r = 6.6 if len(d.rows) <= 200 else 3.1
        for found, mark in ((True, "o"), (False, "X"), (None, "D")):
            xs = [row.length for row in d.rows if row.found is found]
            p.scatter(xs, [i] * len(xs), hit_colour(found), r, mark)
    p.y = Axis(lo=-0.5, hi=len(series) - 0.5, inverted=True, fixed=list(enumerate(names)))
    c.draw(legend(handles, WIDTH - lw - 8, 30))
    return c


# ---------------------------------------------------------------- cache theory

THEORY_COLOURS = {"measured": "#1f4e9c", "unlimited": "#7a7a7a", "unlimited_max": "#b8b8b8",
                  "lru": "#d4860b"}


def theory_chart(series: Sequence[tuple[str, Theory]]) -> Canvas:
    """The measured hit rate against a perfect cache's (what is certain, and what is possible
    when concurrent requests finish first) and an LRU cache's, cumulative over the requests in
    send order; a line style per run. Input: (label, Theory) per run."""
    handles: list[Entry] = []
    drawn: list[tuple[list[float], str, str]] = []
    for i, (label, d) in enumerate(series):
        style = RUN_DASHES[i % len(RUN_DASHES)]
        run = f"{label} · " if len(series) > 1 else ""
        curves = [("measured", d.measured, f"measured: {d.measured[-1]:.1%}"),
                  ("unlimited", d.unlimited, f"perfect cache, certain: {d.unlimited[-1]:.1%}")]
        if d.unlimited_max is not None:
            curves.append(("unlimited_max", d.unlimited_max,
                           f"perfect cache, possible: {d.unlimited_max[-1]:.1%}"))
        if d.lru is not None:
            curves.append(("lru", d.lru, f"{d.cache or 'LRU'}: {d.lru[-1]:.1%}"))
        for key, ys, text in curves:
            drawn.append((ys, THEORY_COLOURS[key], style))
            handles.append(line(THEORY_COLOURS[key], run + text, style))
        if d.concurrency > 1:
            handles.append(note(f"{label if len(series) > 1 else 'run'}: up to "
                                f"{d.concurrency} in flight (the theory takes one request at "
                                "a time)"))
    lw, _ = legend_size(handles)
    c = Canvas(WIDTH, 360)
    p = c.add(Panel((0, 0, WIDTH - lw - 16, 360),
                    title="Cache hit rate: measured against theory (cumulative)",
                    x=Axis(integer=True, label="requests answered, in send order"),
                    y=Axis(lo=0, fmt=percent, label="prompt tokens from cache")))
    for ys, colour, style in drawn:
        p.line(range(1, len(ys) + 1), ys, colour, 2 if colour == THEORY_COLOURS["measured"]
               else 1.4, style)
    c.draw(legend(handles, WIDTH - lw - 8, 30))
    return c


# ---------------------------------------------------------------- latency

LATENCY_COLOURS = {"TTFT": "#3b6fb6", "ITL": "#e07b39", "TPOT": "#7a5195", "E2E": "#2a9d8f"}


def latency_chart(series: Sequence[tuple[str, Latency]]) -> Canvas:
    """Left: the share of measured requests (of gaps, for ITL) at or under each latency, TTFT,
    ITL, TPOT and end-to-end, on a log scale with p50 and p99 marked; a line style per run.
    Right: the requests in flight over the run. Input: (label, Latency) per run."""
    c = Canvas(WIDTH, 380)
    cdf = c.add(Panel((0, 0, WIDTH * 0.6, 380), title="Latency distribution",
                      x=Axis(scale="log", fmt=seconds,
                             label="latency (log scale; dots: p50 and p99)"),
                      y=Axis(lo=0, hi=1.02, fmt=percent,
                             label="requests (ITL: gaps) at or under it")))
    load = c.add(Panel((WIDTH * 0.6, 0, WIDTH * 0.4, 380), title="Requests in flight",
                       x=Axis(lo=0, label="seconds from the run's start"),
                       y=Axis(lo=0, integer=True, label="requests (most in each stretch)")))
    handles: list[Entry] = []
    for i, (label, d) in enumerate(series):
        style = RUN_DASHES[i % len(RUN_DASHES)]
        handles += latency_lines(cdf, d, style, f"{label} · " if len(series) > 1 else "")
        if d.series:
            load.line([t for t, _ in d.series], [n for _, n in d.series],
                      RUN_COLOURS[i % len(RUN_COLOURS)], 1.5, style, step=True)
    if not any(d.series for _, d in series):
        load.note(0.5, 0.5, "not in these results", MUTE, "middle", x_data=False)
    cdf.legend(handles, "lower right")
    return c


def latency_lines(p: Panel, d: Latency, style: str, run: str) -> list[Entry]:
    """One file's distributions on the log axis, p50 and p99 dotted. Output: legend entries."""
    handles = []
    for name, xs in d.dists.items():
        shown = [x for x in xs if x > 0]  # a gap of 0 (one read) has no place on a log axis
        if not shown:
            continue
        ys = [(len(xs) - len(shown) + k + 1) / len(xs) for k in range(len(shown))]
        colour = LATENCY_COLOURS[name]
        p.line(shown, ys, colour, 1.6, style)
        for q in (0.5, 0.99):
            x = xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]
            if x > 0:
                p.scatter([x], [q], colour, 3)
        mid = xs[len(xs) // 2]
        handles.append(line(colour, f"{run}{name}: p50 {seconds(mid) if mid > 0 else '0'}",
                            style))
    return handles
