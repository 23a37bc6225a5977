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
from workloadlang.card.render import TITLES, cost_line
from workloadlang.report.render import CSP, environment
from workloadlang.report.svg import new_figure, styled, to_svg, tokens_label


def card_page(card: Card) -> str:
    """The card's page (see the module)."""
    rows = [{"title": TITLES[n], **row(card.prop(n))} for n in PROPERTIES]
    curve = card.prop("device_capacity").value.get("curve") or []
    chart = Markup(to_svg(curve_chart(curve), "curve", "retained curve")) if curve else None
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


@styled
def curve_chart(curve: list[dict[str, Any]]) -> Any:
    """Tokens kept against tokens filled (newest use first), the tier of each context read."""
    fig = new_figure(9, 3.4)
    ax = fig.subplots()
    x = [c["filled"] for c in curve]
    ax.plot([0, *x], [0, *(c["kept"] for c in curve)], color="#3b6ea8", lw=1.6)
    colours = {"device": "#1f7a48", "host": "#9a6200", "split": "#b06d00", "partial": "#b4233b"}
    for tier, colour in colours.items():
        pts = [c for c in curve if c["tier"] == tier]
        if pts:
            ax.scatter([c["filled"] for c in pts], [c["kept"] for c in pts], s=14, color=colour,
                       label=tier, zorder=3)
    ax.set_xlabel("tokens filled, newest use first")
    ax.set_ylabel("tokens kept")
    ax.xaxis.set_major_formatter(tokens_label)
    ax.yaxis.set_major_formatter(tokens_label)
    ax.set_title("Retained curve: what the cache keeps of what was filled, by tier")
    ax.legend(loc="lower right")
    return fig
