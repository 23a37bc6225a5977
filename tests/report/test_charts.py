"""The charts' SVG, read back: it parses, names its axes, and its marks land where the data says
(each mark's centre, mapped back through the axis's own tick labels, is the value it draws); the
ticks fall on round numbers (decades on a log axis); text is escaped; a dense chart stays small."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from workloadlang.report import axes, charts, data, sample, svg
from workloadlang.report.render import charts as page_charts
from workloadlang.report.sweeppage import chart as sweep_chart

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    """The SVG as an element tree (fails the test when it is not well-formed XML)."""
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg"
    return root


def panels(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{NS}g") if g.get("class") == "panel"]


def texts(el: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in el.iter(f"{NS}text")]


def ticks(panel: ET.Element, which: str) -> list[tuple[float, str]]:
    """(position in px, label) of an axis's tick labels."""
    (group,) = [g for g in panel.iter(f"{NS}g") if g.get("class") == f"{which}axis"]
    coord = "x" if which == "x" else "y"
    return [(float(t.get(coord)), t.text or "") for t in group.findall(f"{NS}text")
            if t.get("dominant-baseline")]  # the axis label has none


def unit(label: str) -> float:
    """A tick label back to its value: `50k`, `1.2M`, `80%`, `2ms`, `1,500`, `0.25`."""
    text = label.replace(",", "")
    for suffix, scale in (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("%", 0.01), ("k", 1e3),
                          ("M", 1e6)):
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * scale
    return float(text)


def inverse(panel: ET.Element, which: str, log: bool = False):
    """px -> data on one axis, fitted through its first and last tick labels."""
    (p0, l0), *_, (p1, l1) = ticks(panel, which)
    v0, v1 = unit(l0), unit(l1)
    if log:
        v0, v1 = math.log10(v0), math.log10(v1)
    f = lambda px: v0 + (px - p0) * (v1 - v0) / (p1 - p0)  # noqa: E731
    return (lambda px: 10 ** f(px)) if log else f


def drawn(panel: ET.Element, cls: str) -> list[ET.Element]:
    """The paths of a class (`mk` marks, `ln` lines) in a panel's plot area (not its legend)."""
    (area,) = [g for g in panel.iter(f"{NS}g") if g.get("class") == "marks"]
    return [p for p in area.iter(f"{NS}path") if p.get("class") == cls]


def centres(panel: ET.Element, fill: str | None = None,
            marker: str | None = None) -> list[tuple[float, float]]:
    """The centres of the marks drawn in a panel (optionally of one fill and marker kind)."""
    out = []
    for p in drawn(panel, "mk"):
        if (fill and p.get("fill") != fill) or (marker and p.get("data-marker") != marker):
            continue
        out += [(float(x), float(y)) for x, y in re.findall(r"M(-?[\d.]+),(-?[\d.]+)", p.get("d"))]
    return out


def chart_svg(make) -> dict[str, str]:
    """Chart key -> its SVG, in the report of one results file."""
    return {sec.key: str(sec.svg) for sec in page_charts([make()], ["x"])}


# ---------------------------------------------------------------- every chart


@pytest.mark.parametrize("make", [sample.retention, sample.agent, sample.perf, sample.abort,
                                  sample.needles])
def test_every_chart_parses_and_names_its_axes(make):
    for key, text in chart_svg(make).items():
        root = parse(text)
        assert root.get("aria-label") and re.fullmatch(r"0 0 [\d.]+ [\d.]+", root.get("viewBox"))
        for panel in panels(root):
            assert len(ticks(panel, "x")) >= 2 or panel is not panels(root)[-1], key
            assert len(ticks(panel, "y")) >= (1 if key == "needles" else 2), key
        labels = " | ".join(texts(root))
        expected = {"retention": ["TTFT (s)", "cached / prompt", "context, in verify order"],
                    "sessions": ["start time (s since the run began)", "main#1",
                                 "reuse (reported cached / expected)"],
                    "speed": ["context (prompt tokens)", "tokens / s"],
                    "abort": ["reuse (cached / expected)", "tokens past the aborted request"],
                    "needles": ["haystack length (prompt tokens)"],
                    "latency": ["latency (log scale; dots: p50 and p99)",
                                "seconds from the run's start"]}[key]
        assert all(e in labels for e in expected), (key, labels)


def test_retention_marks_land_on_their_ttft_and_cached_fraction():
    res = sample.retention(contexts=12, retained=7)
    d = data.retention(res.records, res.calibration, res.params)
    top, bottom = panels(parse(charts.retention_chart([("x", d)]).render("r", "r")))
    X, Y = inverse(bottom, "x"), inverse(top, "y")
    hits = sorted((X(x), Y(y)) for x, y in centres(top, fill=svg.HIT))
    assert [round(x) for x, _ in hits] == list(range(1, 8))
    want = [t for t, h in zip(d.ttft, d.hit) if h]
    assert [y for _, y in hits] == pytest.approx(want, abs=0.002)
    (miss,) = centres(top, fill=svg.MISS)
    assert (X(miss[0]), Y(miss[1])) == pytest.approx((8, d.ttft[7]), abs=0.01)
    Yb = inverse(bottom, "y")
    assert sorted(round(Yb(y), 2) for _, y in centres(bottom)) == [0.0] + [1.0] * 7


def test_the_lanes_colour_by_reuse_and_grow_with_ttft():
    res = sample.agent(sessions=3, steps=4, subs=1, evicted=[2])
    d = data.lanes(res.records, res.verdicts)
    (panel,) = panels(parse(charts.lanes_chart([("x", d)]).render("s", "s")))
    X = inverse(panel, "x")
    y_of = {label: y for y, label in ticks(panel, "y")}
    assert list(y_of) == ["main#1", "main#2", "main#3"]
    fills = {p.get("fill") for p in drawn(panel, "mk")}
    for k, reuse in enumerate(d.reuse):
        if reuse is None:
            continue
        colour = svg.colormap(reuse)
        assert colour in fills
        near = [X(x) for x, y in centres(panel, fill=colour)
                if abs(y - y_of[d.sessions[d.lane[k]]]) < 0.5]
        assert min(abs(x - d.t[k]) for x in near) < 0.005, (k, d.t[k], near)
    assert svg.colormap(0) == svg.RDYLGN[0] and svg.colormap(1) == svg.RDYLGN[-1]
    assert charts.ttft_radius(0.0, 1.0) < charts.ttft_radius(0.1, 1.0) < \
        charts.ttft_radius(1.0, 1.0) == 10.5


def test_the_latency_axis_is_logarithmic_and_its_lines_land_on_the_quantiles():
    d = data.Latency(dists={"TTFT": [0.002, 0.004, 0.03, 0.2], "ITL": [], "TPOT": [],
                            "E2E": []}, series=[(0.0, 1), (1.0, 3), (2.5, 0)])
    cdf, load = panels(parse(charts.latency_chart([("x", d)]).render("l", "l")))
    labels = [label for _, label in ticks(cdf, "x")]
    assert labels == ["10ms", "100ms"], labels  # decades, in seconds
    X, Y = inverse(cdf, "x", log=True), inverse(cdf, "y")
    (path,) = [p for p in drawn(cdf, "ln") if p.get("stroke") == charts.LATENCY_COLOURS["TTFT"]]
    pts = [(X(float(x)), Y(float(y))) for x, y in re.findall(r"([\d.]+),([\d.]+)", path.get("d"))]
    assert [x for x, _ in pts] == pytest.approx([0.002, 0.004, 0.03, 0.2], rel=0.02)
    assert [y for _, y in pts] == pytest.approx([0.25, 0.5, 0.75, 1.0], abs=0.005)
    Xl, Yl = inverse(load, "x"), inverse(load, "y")
    (step,) = [p for p in drawn(load, "ln") if p.get("stroke") == svg.RUN_COLOURS[0]]
    corners = [(round(Xl(float(x)), 2), round(Yl(float(y)), 2))
               for x, y in re.findall(r"([\d.]+),([\d.]+)", step.get("d"))]
    assert corners == [(0, 1), (1, 1), (1, 3), (2.5, 3), (2.5, 0)]


def test_a_sweep_chart_with_names_on_its_axis():
    text = sweep_chart("goodput", "engine", [("a", ["vllm", "sglang"], [4.0, 2.0])], 0)
    (panel,) = panels(parse(text))
    assert [label for _, label in ticks(panel, "x")] == ["vllm", "sglang"]
    Y = inverse(panel, "y")
    assert sorted(round(Y(y), 2) for _, y in centres(panel)) == [2.0, 4.0]
    assert "engine" in texts(panel)


def test_text_is_escaped_and_ids_are_salted_by_the_key():
    d = data.Needles(rows=[data.NeedleRow("r", 1000, True, "", "")], depth=None)
    canvas = charts.needles_chart([('<b id="x">&</b>', d), ("two", d)])
    text = canvas.render("needles", "a <title>")
    root = parse(text)  # parses: every & and < escaped
    assert '<b id="x">&</b> ' not in text and "&lt;b id=&quot;x&quot;&gt;&amp;&lt;/b&gt;" in text
    assert any(t.startswith('<b id="x">&</b>') for t in texts(root))
    ids = [el.get("id") for el in root.iter() if el.get("id")]
    assert ids and all(i.startswith("needles-") for i in ids)
    refs = re.findall(r'url\(#([^)]+)\)', text)
    assert refs and set(refs) <= set(ids)


def test_a_dense_chart_stays_small_vector():
    """1,800 requests: marks of one colour and shape share a path, so the paths do not grow
    with the marks, and each mark costs a few dozen bytes."""
    res = sample.agent(sessions=40, steps=40, subs=2)
    d = data.lanes(res.records, res.verdicts)
    text = charts.lanes_chart([("x", d)]).render("s", "s")
    root = parse(text)
    marks = sum(len(centres(p)) for p in panels(root))
    assert marks >= len(d.t) > 1_500
    assert len(list(root.iter(f"{NS}path"))) < 60
    assert len(text) / marks < 100
    assert "<image" not in text


# ---------------------------------------------------------------- ticks and scales


def test_linear_ticks_fall_on_round_steps():
    assert axes.linear_ticks(0, 1.05, nbins=5) == [0, 0.25, 0.5, 0.75, 1.0]
    assert axes.linear_ticks(-0.4, 9.4, nbins=8) == [0, 2, 4, 6, 8]
    assert axes.linear_ticks(0.5, 3.5, nbins=8, integer=True) == [1, 2, 3]
    assert axes.linear_ticks(40_000, 90_000) == [40_000 + 10_000 * k for k in range(6)]
    assert axes.plain(0.25)(0.5) == "0.50" and axes.plain(2000)(8000) == "8,000"


def test_log_ticks_are_decades_and_one_two_five_within_one():
    assert axes.log_ticks(0.0015, 0.25)[0] == [0.01, 0.1]
    major, minor = axes.log_ticks(1.5, 12)
    assert major == [2, 5, 10] and 3 in minor and 2 not in minor


def test_axis_limits_pad_the_data_unless_set():
    assert axes.Axis().limits([0, 10]) == (-0.5, 10.5)
    assert axes.Axis(lo=0).limits([2, 10]) == (0, 10.4)
    assert axes.Axis().limits([]) == (-0.05, 1.05)
    lo, hi = axes.Axis(scale="log").limits([0.001, 0.1, 0, -1])
    assert lo < 0.001 and hi > 0.1 and lo > 0


def test_tick_labels_read_as_people_write_them():
    assert [axes.tokens(v) for v in (950, 50_000, 1_200_000)] == ["950", "50k", "1.2M"]
    assert [axes.seconds(v) for v in (5e-5, 0.002, 1.5)] == ["50µs", "2ms", "1.5s"]
    assert [axes.percent(v) for v in (0.25, 1.0, 0.125)] == ["25%", "100%", "12.5%"]
