"""One matplotlib figure per benchmark kind, overlaying every results file given.

Input: a list of `(run label, data)` pairs, the data from `workloadlang.report.data` (all of one
kind). Output: a `matplotlib.figure.Figure` (turn it into inline SVG with `svg.to_svg`).
Colour carries the verdict-bearing value (hit / miss, reuse); the results file is told apart by
marker shape, line style or its own panel, named in the legend.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

from workloadlang.report.data import Abort, Lanes, Latency, Needles, Retention, Speed, Theory
from workloadlang.report.svg import (
    HIT,
    MISS,
    RASTER_ABOVE,
    RUN_COLOURS,
    RUN_MARKERS,
    UNKNOWN,
    new_figure,
    styled,
    tokens_label,
)

TOKENS = FuncFormatter(tokens_label)
REUSE_CMAP = "RdYlGn"


def hit_colour(h: bool | None) -> str:
    """Input: hit / miss / unknown. Output: green, red or grey."""
    return HIT if h else MISS if h is False else UNKNOWN


def legend_dot(colour: str, text: str, marker: str = "o", hollow: bool = False) -> Line2D:
    """A legend entry for a mark that has no artist of its own."""
    return Line2D([], [], linestyle="none", marker=marker, markersize=7, label=text,
                  markerfacecolor="white" if hollow else colour, markeredgecolor=colour)


def legend_line(colour: str, text: str, style: str = "-", width: float = 1.5) -> Line2D:
    """A legend entry for a line (threshold, mean, run)."""
    return Line2D([], [], color=colour, linestyle=style, linewidth=width, label=text)


# ---------------------------------------------------------------- retention


@styled
def retention_chart(series: Sequence[tuple[str, Retention]]) -> Figure:
    """TTFT (top) and cached fraction (bottom) per context in verify order, coloured hit / miss,
    with the calibrated threshold, the first miss and the point where the re-sent contexts add
    up to the stated KV size. Input: (label, Retention) per run. Output: the figure."""
    fig = new_figure(11, 6.2)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1])
    handles: list[Any] = [legend_dot(HIT, "hit"), legend_dot(MISS, "miss"),
                          legend_dot(UNKNOWN, "unknown / errored")]
    for i, (label, d) in enumerate(series):
        handles += retention_run(top, bottom, d, i, label if len(series) > 1 else "")
    top.set_ylabel("TTFT (s)")
    top.set_ylim(bottom=0)
    top.set_title("Retention: TTFT per context, re-sent newest first")
    bottom.set_ylabel("cached / prompt")
    bottom.set_ylim(0, 1.05)
    bottom.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    bottom.set_xlabel("context, in verify order (1 = newest)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.legend(handles=handles, loc="upper left", ncols=3)
    return fig


def retention_run(top: Any, bottom: Any, d: Retention, i: int, label: str) -> list[Any]:
    """Draw one run's retention marks and markers; return its extra legend entries."""
    marker, style = RUN_MARKERS[i % len(RUN_MARKERS)], ["--", ":", "-.", "-"][i % 4]
    colours = [hit_colour(h) for h in d.hit]
    dense = len(d.order) > RASTER_ABOVE
    if dense:
        for ax in (top, bottom):
            ax.set_rasterization_zorder(3.5)
    xs = [x for x, t in zip(d.order, d.ttft) if t is not None]
    top.plot(xs, [t for t in d.ttft if t is not None], color="#c5c9cf", linewidth=0.8,
             linestyle=["-", "--", ":", "-."][i % 4], zorder=1)
    top.scatter(d.order, [math.nan if t is None else t for t in d.ttft], c=colours,
                marker=marker, s=10 if dense else 30, zorder=3, edgecolors="none")
    bottom.scatter(d.order, [math.nan if f is None else f for f in d.cached_frac], c=colours,
                   marker=marker, s=8 if dense else 22, zorder=3, edgecolors="none")
    suffix = f" ({label})" if label else ""
    extra: list[Any] = []
    if label:
        extra.append(legend_dot("#4a4f57", label, marker=marker, hollow=True))
    if d.threshold_s:
        top.axhline(d.threshold_s, color="#4a4f57", linestyle=style, linewidth=1)
        extra.append(legend_line("#4a4f57", f"calibrated threshold {d.threshold_s:.3g} s{suffix}",
                                 style, 1))
    if d.first_miss:
        for ax in (top, bottom):
            ax.axvline(d.first_miss, color=MISS, linestyle=style, linewidth=1.2)
        right_half = d.first_miss > 0.6 * len(d.order)
        top.annotate(f"first miss #{d.first_miss}{suffix}\n{retained_text(d)}",
                     xy=(d.first_miss, 0.97), xycoords=("data", "axes fraction"),
                     xytext=(-5 if right_half else 5, -26 * i), textcoords="offset points",
                     va="top", ha="right" if right_half else "left", fontsize=8.5, color=MISS,
                     annotation_clip=False).set_in_layout(False)
    if d.kv_reached_at:
        for ax in (top, bottom):
            ax.axvline(d.kv_reached_at, color="#3b6fb6", linestyle=style, linewidth=1.2)
        top.annotate(f"stated KV size {tokens_label(d.kv_size)} re-sent{suffix}",
                     xy=(d.kv_reached_at, 0.02), xycoords=("data", "axes fraction"),
                     xytext=(-4, 2 + 12 * i), textcoords="offset points", ha="right",
                     fontsize=8.5, color="#3b6fb6", annotation_clip=False).set_in_layout(False)
    return extra


def retained_text(d: Retention) -> str:
    """`retained 57k tokens = 88% of the stated KV size` (or without the KV size)."""
    text = f"retained {tokens_label(d.retained_tokens)} tokens"
    if d.kv_size:
        text += f" = {d.retained_tokens / d.kv_size:.0%} of the stated KV size"
    return text


# ---------------------------------------------------------------- sessions over time


@styled
def lanes_chart(series: Sequence[tuple[str, Lanes]]) -> Figure:
    """One lane per session, one mark per request at its start: colour = reuse, size = TTFT,
    shape = label, a faint bar for its duration, verdicts on the right. One panel per run.
    Input: (label, Lanes) per run. Output: the figure."""
    heights = [1.2 + min(10.0, 0.28 * len(d.sessions)) for _, d in series]
    fig = new_figure(11, sum(heights) + 1.2)
    axes = fig.subplots(len(series), 1, squeeze=False, sharex=True,
                        height_ratios=heights)[:, 0]
    labels = list(dict.fromkeys(lab for _, d in series for lab in d.labels))
    shapes = {lab: RUN_MARKERS[k % len(RUN_MARKERS)] for k, lab in enumerate(labels)}
    tmax = max((t for _, d in series for t in d.ttft if t is not None), default=1.0) or 1.0
    norm = Normalize(0, 1)
    biggest = min(biggest_mark(len(d.sessions), h - 0.6) for h, (_, d) in zip(heights, series))
    for ax, (label, d) in zip(axes, series):
        lanes_panel(ax, d, shapes, tmax, norm, biggest)
        ax.set_title(f"Sessions over time{' — ' + label if len(series) > 1 else ''}")
    axes[-1].set_xlabel("start time (s since the run began)")
    handles = [legend_dot("#4a4f57", lab, marker=shapes[lab], hollow=True) for lab in labels]
    handles += [legend_dot("#9aa0a6", "cold: little expected from the cache", hollow=True),
                Line2D([], [], linestyle="none", marker="x", color="black",
                       label="errored / aborted")]
    handles += size_legend(tmax, biggest)
    fig.legend(handles=handles, loc="outside lower left", ncols=min(6, len(handles)))
    fig.colorbar(ScalarMappable(norm=norm, cmap=REUSE_CMAP), ax=list(axes), location="bottom",
                 shrink=0.35, aspect=40, pad=0.01, format=PercentFormatter(1.0, decimals=0),
                 label="reuse (reported cached / expected)")
    return fig


def ttft_size(t: float | None, tmax: float, biggest: float = 230) -> float:
    """Mark area (pt²) for a TTFT: from a dot (instant) to `biggest` (the chart's slowest)."""
    small = min(10.0, biggest / 6)
    return small + (biggest - small) * ((t or 0) / tmax) ** 0.5


def biggest_mark(lanes: int, panel_in: float) -> float:
    """The largest mark area that still fits its lane: at most 1.5 lane pitches across."""
    pitch_pt = 72 * panel_in / max(1, lanes)
    return min(230.0, (1.5 * pitch_pt) ** 2)


def size_legend(tmax: float, biggest: float) -> list[Any]:
    """Legend entries for two mark sizes (a tenth of the slowest TTFT, and the slowest)."""
    out = []
    for frac in (0.1, 1.0):
        t = tmax * frac
        out.append(Line2D([], [], linestyle="none", marker="o", color="#c5c9cf",
                          markersize=ttft_size(t, tmax, biggest) ** 0.5, label=f"TTFT {t:.2g} s"))
    return out


def lanes_panel(ax: Any, d: Lanes, shapes: dict[str, str], tmax: float, norm: Any,
                biggest: float) -> None:
    """Draw one run's lanes: durations, marks per label (area up to `biggest`), failures,
    verdicts."""
    if len(d.t) > RASTER_ABOVE:
        ax.set_rasterization_zorder(3.5)  # every mark below: one embedded PNG per panel
    ax.hlines(d.lane, d.t, [t + e for t, e in zip(d.t, d.e2e)], color="#d3d6db",
              linewidth=1.5 if len(d.sessions) <= 40 else 0.6, zorder=1)
    for lab in dict.fromkeys(d.label):
        idx = [k for k, x in enumerate(d.label) if x == lab]
        known = [k for k in idx if d.reuse[k] is not None]
        cold = [k for k in idx if d.reuse[k] is None]
        ax.scatter([d.t[k] for k in known], [d.lane[k] for k in known],
                   c=[d.reuse[k] for k in known], cmap=REUSE_CMAP, norm=norm,
                   s=[ttft_size(d.ttft[k], tmax, biggest) for k in known], marker=shapes[lab],
                   edgecolors="#30343a" if len(d.t) <= RASTER_ABOVE else "none",
                   linewidths=0.4, zorder=3)
        ax.scatter([d.t[k] for k in cold], [d.lane[k] for k in cold], facecolors="white",
                   edgecolors="#9aa0a6", s=[ttft_size(d.ttft[k], tmax, biggest) for k in cold],
                   marker=shapes[lab], linewidths=0.8, zorder=2)
    bad = [k for k, f in enumerate(d.failed) if f]
    if bad:
        ax.scatter([d.t[k] for k in bad], [d.lane[k] for k in bad], marker="x", color="black",
                   s=25, zorder=3.2, linewidths=1)
    lane_axis(ax, d)


def lane_axis(ax: Any, d: Lanes) -> None:
    """Session names on the left, verdicts on the right (coloured squares past 40 lanes)."""
    n = len(d.sessions)
    ax.set_ylim(n - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    if n <= 40:
        ax.set_yticks(range(n), d.sessions)
        right = ax.secondary_yaxis("right")
        right.set_yticks(range(n), [v or "–" for v in d.verdicts])
        for tick, v in zip(right.get_yticklabels(), d.verdicts):
            tick.set_color(verdict_colour(v))
        right.tick_params(length=0)
        right.spines["right"].set_visible(False)
        return
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    ax.yaxis.set_major_formatter(FuncFormatter(
        lambda y, _p: d.sessions[int(y)] if 0 <= int(y) < n else ""))
    ax.scatter([1.008] * n, range(n), marker="s", s=6, clip_on=False,
               c=[verdict_colour(v) for v in d.verdicts], transform=ax.get_yaxis_transform())
    counts: dict[str, int] = {}
    for v in d.verdicts:
        counts[v or "–"] = counts.get(v or "–", 0) + 1
    summary = ", ".join(f"{k}: {c}" for k, c in sorted(counts.items(), key=lambda kv: -kv[1]))
    ax.text(1.0, 1.01, f"verdicts (right edge) — {summary}", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=8.5)


def verdict_colour(v: str) -> str:
    """Input: a session verdict. Output: green for `ok`, grey when unjudged, else red."""
    return HIT if v == "ok" else UNKNOWN if v in ("", "unverified") else MISS


# ---------------------------------------------------------------- speed vs context


@styled
def speed_chart(series: Sequence[tuple[str, Speed]]) -> Figure:
    """Prefill and generation tokens/s against the context size at each level of the grown
    label: a thin line per run, a thick line for the mean. Input: (label, Speed) per run
    (results file). Output: the figure."""
    fig = new_figure(11, 4.2)
    pp_ax, tg_ax = fig.subplots(1, 2)
    handles: list[Any] = []
    for i, (label, d) in enumerate(series):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for ax, key in ((pp_ax, "pp"), (tg_ax, "tg")):
            speed_lines(ax, d, key, colour, RUN_MARKERS[i % len(RUN_MARKERS)])
        name = f"{label}: " if len(series) > 1 else ""
        handles += [legend_line(colour, f"{name}mean of {len(d.runs)} conversations", width=2.4),
                    legend_line(colour, f"{name}each conversation", width=0.9)]
    label = series[0][1].label
    for ax, what in ((pp_ax, "Prefill"), (tg_ax, "Generation")):
        ax.set_title(f"{what} speed vs context (`{label}` levels)")
        ax.set_xlabel("context (prompt tokens)")
        ax.set_ylabel("tokens / s")
        ax.xaxis.set_major_formatter(TOKENS)
        ax.yaxis.set_major_formatter(TOKENS)
        ax.set_ylim(bottom=0)
    pp_ax.legend(handles=handles, loc="best")
    return fig


def speed_lines(ax: Any, d: Speed, key: str, colour: str, marker: str) -> None:
    """Input: an axes, one file's `Speed`, `pp` or `tg`. Draws one thin line per run (one PNG
    when there are many points) and the mean on top."""
    if sum(len(run) for run in d.runs) > RASTER_ABOVE:
        ax.set_rasterization_zorder(1.5)
    lines = [[(p.context, getattr(p, key)) for p in run if getattr(p, key) is not None]
             for run in d.runs]
    ax.add_collection(LineCollection([ln for ln in lines if ln], colors=colour, linewidths=0.9,
                                     alpha=0.45, zorder=1))
    ax.autoscale_view()
    mean = [(p.context, getattr(p, key)) for p in d.mean() if getattr(p, key) is not None]
    if mean:
        ax.plot(*zip(*mean), color=colour, linewidth=2.4, marker=marker,
                markersize=4 if len(mean) < 60 else 0, zorder=3)


# ---------------------------------------------------------------- abort


@styled
def abort_chart(series: Sequence[tuple[str, Abort]]) -> Figure:
    """Left: the re-prompt's reuse per run against the gate. Right: where the cache stopped,
    in tokens past the end of the aborted request's prompt, with the streamed point (the
    tokens streamed before the abort) marked. Input: (label, Abort) per run. Output: figure."""
    fig = new_figure(11, 3.2 + min(4.0, 0.18 * max(len(d.runs) for _, d in series)))
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.4])
    n = len(series)
    handles: list[Any] = [legend_dot(HIT, "hit"), legend_dot(MISS, "miss"),
                          legend_dot(UNKNOWN, "unknown / errored")]
    for i, (label, d) in enumerate(series):
        off = (i - (n - 1) / 2) * 0.18
        marker = RUN_MARKERS[i % len(RUN_MARKERS)]
        abort_reuse(left, d, off, marker)
        abort_tokens(right, d, off, marker)
        if n > 1:
            handles.append(legend_dot("#4a4f57", label, marker=marker, hollow=True))
    thresholds = {d.threshold for _, d in series if d.threshold is not None}
    for t in thresholds:
        left.axhline(t, color="#4a4f57", linestyle="--", linewidth=1)
        handles.append(legend_line("#4a4f57", f"gate: reuse ≥ {t:.0%}", "--", 1))
    left.set_title("Abort: reuse of the re-prompt per run")
    left.set_xlabel("run")
    left.set_ylabel("reuse (cached / expected)")
    left.set_ylim(0, 1.05)
    left.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(handles=handles, loc="lower left")
    abort_token_axis(right)
    return fig


def abort_reuse(ax: Any, d: Abort, off: float, marker: str) -> None:
    """Reuse per run, coloured hit / miss."""
    dense = len(d.runs) > RASTER_ABOVE
    if dense:
        ax.set_rasterization_zorder(3.5)
    ax.scatter([r.run + off for r in d.runs],
               [math.nan if r.reuse is None else r.reuse for r in d.runs],
               c=[hit_colour(r.hit) for r in d.runs], marker=marker, s=8 if dense else 45,
               zorder=3)


def abort_tokens(ax: Any, d: Abort, off: float, marker: str) -> None:
    """Per run (a row): reported cached (filled) and expected (hollow) tokens past the aborted
    prompt's end, and the streamed point (a bar)."""
    runs = [r for r in d.runs if r.prime_prompt is not None]
    dense = len(runs) > RASTER_ABOVE
    if dense:
        ax.set_rasterization_zorder(4.5)
    k = 0.15 if dense else 1.0
    ax.scatter([r.streamed for r in runs], [r.run + off for r in runs], marker="|",
               s=260 * k, color="#3b6fb6", linewidths=2 * k, zorder=2)
    exp = [r for r in runs if r.expected is not None]
    ax.scatter([r.expected - r.prime_prompt for r in exp], [r.run + off for r in exp],
               marker=marker, s=60 * k, facecolors="white", edgecolors="#4a4f57", zorder=3)
    got = [r for r in runs if r.cached is not None]
    ax.scatter([r.cached - r.prime_prompt for r in got], [r.run + off for r in got],
               marker=marker, s=36 * k, c=[hit_colour(r.hit) for r in got], zorder=4)


def abort_token_axis(ax: Any) -> None:
    """Axis, zero line and legend of the "where the cache stopped" panel."""
    ax.axvline(0, color="#8a8f98", linewidth=1)
    ax.set_title("Where the cache stopped (0 = end of the aborted prompt)")
    ax.set_xlabel("tokens past the aborted request's prompt")
    ax.set_ylabel("run")
    ax.invert_yaxis()
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles=[legend_dot("#4a4f57", "reported cached", marker="o"),
                       legend_dot("#4a4f57", "expected (perfect cache)", hollow=True),
                       Line2D([], [], linestyle="none", marker="|", markersize=12,
                              markeredgewidth=2, color="#3b6fb6",
                              label="streamed point (tokens streamed before the abort)")],
              loc="best")


# ---------------------------------------------------------------- needles


@styled
def needles_chart(series: Sequence[tuple[str, Needles]]) -> Figure:
    """Found / not found per haystack length, one row per run (with its needle depth).
    Input: (label, Needles) per run. Output: the figure."""
    fig = new_figure(11, 1.6 + 0.45 * len(series))
    ax = fig.subplots()
    names = []
    for i, (label, d) in enumerate(series):
        depth = f" (needle at {d.depth:.0%})" if d.depth is not None else ""
        names.append(f"{label}{depth}" if len(series) > 1 else f"found?{depth}")
        if len(d.rows) > RASTER_ABOVE:
            ax.set_rasterization_zorder(3.5)
        for found, mark in ((True, "o"), (False, "X"), (None, "D")):
            xs = [row.length for row in d.rows if row.found is found]
            ax.scatter(xs, [i] * len(xs), marker=mark, s=90 if len(d.rows) <= 200 else 20,
                       zorder=3, color=hit_colour(found))
    ax.set_yticks(range(len(series)), names)
    ax.set_ylim(len(series) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(TOKENS)
    ax.set_xlabel("haystack length (prompt tokens)")
    ax.set_title("Needles: found or not per length")
    fig.legend(handles=[legend_dot(HIT, "found"), legend_dot(MISS, "not found", marker="X"),
                        legend_dot(UNKNOWN, "errored", marker="D")],
               loc="outside right upper")
    return fig


# ---------------------------------------------------------------- cache theory

THEORY_COLOURS = {"measured": "#1f4e9c", "unlimited": "#7a7a7a", "unlimited_max": "#b8b8b8",
                  "lru": "#d4860b"}
RUN_STYLES = ("-", "--", ":", "-.")


@styled
def theory_chart(series: Sequence[tuple[str, Theory]]) -> Figure:
    """The measured hit rate against a perfect cache's (what is certain, and what is possible
    when concurrent requests finish first) and an LRU cache's, cumulative over the requests in
    send order; a line style per run. Input: (label, Theory) per run."""
    fig = new_figure(11, 3.6)
    ax = fig.subplots()
    handles = []
    for i, (label, d) in enumerate(series):
        style = RUN_STYLES[i % len(RUN_STYLES)]
        xs = range(1, len(d.measured) + 1)
        lines = [("measured", d.measured, f"measured: {d.measured[-1]:.1%}"),
                 ("unlimited", d.unlimited, f"perfect cache, certain: {d.unlimited[-1]:.1%}")]
        if d.unlimited_max is not None:
            lines.append(("unlimited_max", d.unlimited_max,
                          f"perfect cache, possible: {d.unlimited_max[-1]:.1%}"))
        if d.lru is not None:
            lines.append(("lru", d.lru, f"{d.cache or 'LRU'}: {d.lru[-1]:.1%}"))
        for key, ys, text in lines:
            ax.plot(xs, ys, color=THEORY_COLOURS[key], linestyle=style,
                    linewidth=2 if key == "measured" else 1.4)
            run = f"{label} · " if len(series) > 1 else ""
            handles.append(legend_line(THEORY_COLOURS[key], run + text, style))
        if d.concurrency > 1:
            handles.append(legend_line("white", f"{label if len(series) > 1 else 'run'}: "
                                       f"up to {d.concurrency} in flight (the theory takes "
                                       "one request at a time)", width=0))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("requests answered, in send order")
    ax.set_ylabel("prompt tokens from cache")
    ax.set_title("Cache hit rate: measured against theory (cumulative)")
    fig.legend(handles=handles, loc="outside right upper")
    return fig


# ---------------------------------------------------------------- latency

LATENCY_COLOURS = {"TTFT": "#3b6fb6", "ITL": "#e07b39", "TPOT": "#7a5195", "E2E": "#2a9d8f"}


@styled
def latency_chart(series: Sequence[tuple[str, Latency]]) -> Figure:
    """Left: the share of measured requests (of gaps, for ITL) at or under each latency, TTFT,
    ITL, TPOT and end-to-end, on a log scale with p50 and p99 marked; a line style per run.
    Right: the requests in flight over the run. Input: (label, Latency) per run."""
    fig = new_figure(11, 3.8)
    cdf, load = fig.subplots(1, 2, width_ratios=[3, 2])
    handles: list[Any] = []
    for i, (label, d) in enumerate(series):
        style = RUN_STYLES[i % len(RUN_STYLES)]
        run = f"{label} · " if len(series) > 1 else ""
        for name, xs in d.dists.items():
            shown = [x for x in xs if x > 0]  # a gap of 0 (one read) has no place on a log axis
            if not shown:
                continue
            ys = [(len(xs) - len(shown) + k + 1) / len(xs) for k in range(len(shown))]
            cdf.plot(shown, ys, color=LATENCY_COLOURS[name], linestyle=style, linewidth=1.6)
            for q in (0.5, 0.99):
                x = xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]
                if x > 0:
                    cdf.plot([x], [q], marker="o", markersize=4, color=LATENCY_COLOURS[name])
            mid = xs[len(xs) // 2]
            handles.append(legend_line(LATENCY_COLOURS[name], f"{run}{name}: p50 "
                                       f"{seconds_label(mid) if mid > 0 else '0'}", style))
        if d.series:
            load.step([t for t, _ in d.series], [n for _, n in d.series], where="post",
                      color=RUN_COLOURS[i % len(RUN_COLOURS)], linestyle=style)
    cdf.set_xscale("log")
    cdf.xaxis.set_major_formatter(FuncFormatter(seconds_label))
    cdf.yaxis.set_major_formatter(PercentFormatter(1.0))
    cdf.set_ylim(0, 1.02)
    cdf.set_xlabel("latency (log scale; dots: p50 and p99)")
    cdf.set_ylabel("requests (ITL: gaps) at or under it")
    cdf.set_title("Latency distribution")
    cdf.legend(handles=handles, loc="lower right")
    load.set_title("Requests in flight")
    load.set_xlabel("seconds from the run's start")
    load.set_ylabel("requests (most in each stretch)")
    load.yaxis.set_major_locator(MaxNLocator(integer=True))
    load.set_ylim(bottom=0)
    return fig


def seconds_label(x: float, _pos: Any = None) -> str:
    """A log-axis tick: `50µs`, `2ms`, `1.5s`."""
    if x < 1e-3:
        return f"{x * 1e6:g}µs"
    return f"{x * 1e3:g}ms" if x < 1 else f"{x:g}s"
