"""The terminal: what a person sees of a run while it runs and after (`console.live` on a
terminal, `console.lines` otherwise), and the formatting of numbers shared with the HTML report
(`console.format`).

Input: the plan, then records and events as they happen, then the `Results`. Output: text.
"""

from __future__ import annotations

import sys
from typing import IO

from workloadlang.console.lines import PlainView
from workloadlang.plan.model import Plan


def make_view(plan: Plan, viz: bool | None, out: IO[str] = sys.stdout):
    """The live view on a terminal (or with --viz), plain lines otherwise."""
    tty = out.isatty() if hasattr(out, "isatty") else False
    if (viz is None and tty) or viz:
        from workloadlang.console.live import LiveView

        return LiveView(plan, out)
    return PlainView(plan, out)
