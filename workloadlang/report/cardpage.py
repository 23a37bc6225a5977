"""The cache card (`wl probe`) as an HTML page: its section of the report.

Input: a `card.Card`. Output: one self-contained HTML page (no scripts, the same
Content-Security-Policy as the run report): the engine, every property with its status, value,
interval, basis and the requests it rests on, the retained curve as a chart, each experiment
with the command that repeats it, and the cost next to a naive bisection's (docs/probe.md).
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from workloadlang.card import PROPERTIES, Card
from workloadlang.card.cardtext import TITLES, cost_line
from workloadlang.report.axes import Axis, Panel, tokens
from workloadlang.report.charts import BLUE, WIDTH
from workloadlang.report.render import CSP, environment
from workloadlang.report.svg import Canvas, dot

TIER_COLOURS = {"device": "#1f7a48", "host": "#9a6200", "split": "#b06d00",
                "partial": "#b4233b"}


def card_page(card: Card) -> str:
    """The card's page (see the module)."""
    rows = [{"title": TITLES[n], **row(card.prop(n))} for n in PROPERTIES]
    # the card's property values are its own JSON (card.contract: each experiment's figures)
    curve = card.prop("device_capacity").value.get("curve") or []
    chart = Markup(curve_chart(curve).render("curve", "retained curve")) if curve else None
    return environment().get_template("card.html.j2").render(
        csp=CSP, engine=card.engine, started=card.started_at, rows=rows, chart=chart,
        experiments=[{**e.model_dump(), "command": command(e)} for e in card.experiments],
        cost=cost_line(card), left_out=card.left_out, exit_code=card.exit_code)


def row(p: Any) -> dict[str, Any]:
    interval = "" if not p.interval else f"{p.interval[0]:,.0f} – {p.interval[1]:,.0f}"
    return {"status": p.status.replace("_", " "), "text": p.summary if p.status == "known"
            else p.reason, "interval": interval, "basis": p.basis,
            "requests": len(p.requests), "experiment": p.experiment or ""}


def command(e: Any) -> str:
    """The `wl run` that repeats an experiment (long lists shortened in the page)."""
    flags = " ".join(f"-p {k}={short(str(v))}" for k, v in e.params.items())
    return f"wl run {e.workload} --salt {e.salt} {flags}"


def short(v: str, most: int = 60) -> str:
    return v if len(v) <= most else v[:most] + "…"


def curve_chart(curve: list[dict[str, Any]]) -> Canvas:
    """Tokens kept against tokens filled (newest use first), the tier of each context read.
    `curve`: the card's JSON (`device_capacity`'s `curve`: `filled`, `kept`, `tier` a point)."""
    c = Canvas(WIDTH, 360)
    p = c.add(Panel((0, 0, WIDTH, 360),
                    title="Retained curve: what the cache keeps of what was filled, by tier"))
    p.line([0, *(e["filled"] for e in curve)], [0, *(e["kept"] for e in curve)], BLUE, 1.6)
    entries = []
    for tier, colour in TIER_COLOURS.items():
        pts = [e for e in curve if e["tier"] == tier]
        if pts:
            p.scatter([e["filled"] for e in pts], [e["kept"] for e in pts], colour, 4)
            entries.append(dot(colour, tier))
    p.x = Axis(lo=0, label="tokens filled, newest use first", fmt=tokens)
    p.y = Axis(lo=0, label="tokens kept", fmt=tokens)
    p.legend(entries, "lower right")
    return c
