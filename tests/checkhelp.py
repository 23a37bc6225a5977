"""`wl check` of a workload given as text, as (code, message) pairs: parse errors and checks."""

from __future__ import annotations

from workloadlang import api
from workloadlang.diagnostics import WorkloadError


def check_codes(text: str) -> list[tuple[str, str]]:
    """Input: a workload's text. Output: the (code, message) of every diagnostic `wl check`
    gives it: the parse's errors, else the checker's."""
    source = api.Source(name="t.wl", text=text)
    try:
        wl = api.parse_checked(source)
    except WorkloadError as e:
        return [(d.code, d.message) for d in e.diagnostics]
    return [(d.code, d.message) for d in api.check(wl)]
