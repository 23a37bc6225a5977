"""The names a workload declares: labels, phases, sessions and request names.

Input: an `ir.Workload` and the list its diagnostics go to. Output: `Declared`, the sets of
names a selector (`ttft{main, warm}`) or a `resend` may use, and what to say of a name it does
not know (a did-you-mean, or that it names a session or a request). Duplicate request names
(WL202) and a phase inside a phase (WL214) are reported while walking. Used by
`workloadlang.check`.
"""

from __future__ import annotations

from typing import Any

from workloadlang import ir
from workloadlang.diagnostics import Diagnostic, did_you_mean, error
from workloadlang.parse import FLAGS


def trace_label(s: ir.Session) -> str:
    """The label of a trace session's requests: its `label` option when a string, else the
    session's name."""
    for o in s.trace.options if s.trace else ():
        if o.key == "label" and isinstance(o.value, ir.Str):
            return o.value.value
    return s.name


class Declared:
    """Labels, phases, sessions and request names the workload declares (for selectors and
    `resend`); duplicate request names are reported here."""

    def __init__(self, wl: ir.Workload, diags: list[Diagnostic]):
        self.labels: set[str] = set()
        self.phases: set[str] = set()
        self.sessions = {s.name for s in wl.sessions}
        self.requests: dict[str, ir.Span] = {}
        self.diags = diags
        # per session statement: the labels and phases its requests can have
        self.in_session: dict[str, tuple[set[str], set[str]]] = {}
        for s in wl.sessions:
            before = (set(self.labels), set(self.phases))
            self.labels, self.phases = set(), set()
            self.walk(s.body, None)
            if s.trace is not None:
                self.labels.add(trace_label(s))
            self.in_session[s.name] = (self.labels, self.phases)
            self.labels, self.phases = before[0] | self.labels, before[1] | self.phases

    def walk(self, body: tuple, phase: ir.Phase | None) -> None:
        for stmt in body:
            self.declare(stmt)
            if isinstance(stmt, ir.Phase) and phase is not None:
                self.diags.append(error("WL214", f"phase `{stmt.name}` is inside phase "
                                        f"`{phase.name}`", stmt.span,
                                        "phases are barriers across sessions and do not nest"))
            inner = stmt if isinstance(stmt, ir.Phase) else phase
            for field in ("body", "then", "orelse"):
                self.walk(getattr(stmt, field, ()), inner)

    def declare(self, stmt: Any) -> None:
        if getattr(stmt, "label", None):
            self.labels.add(stmt.label)
        if isinstance(stmt, ir.Turn):
            self.labels.add(stmt.name)
        if isinstance(stmt, ir.Phase):
            self.phases.add(stmt.name)
        name = getattr(stmt, "name", None)
        if isinstance(stmt, (ir.Reply, ir.Probe)) and name:
            if name in self.requests:
                self.diags.append(error("WL202", f"duplicate request name `{name}`", stmt.span,
                                        f"the first is on line {self.requests[name].line}"))
            self.requests.setdefault(name, stmt.span)

    def can_read(self, session: str, selector: tuple[ir.SelItem, ...]) -> bool:
        """Whether a selector can pick a request of session statement `session` (by its names:
        labels, phases, `session=`; outcome flags and windows may pick any)."""
        labels, phases = self.in_session.get(session, (set(), set()))
        for item in selector:
            if item.key == "session" and item.value != session:
                return False
            if (item.key == "name" and item.value not in labels | phases) or (
                    item.key == "label" and item.value not in labels) or (
                    item.key == "phase" and item.value not in phases):
                return False
        return True

    def matching(self, key: str) -> set[str]:
        """The names a selector item with this key can match."""
        return {"label": self.labels, "phase": self.phases, "session": self.sessions,
                "name": self.labels | self.phases}.get(key, set())

    def unknown_message(self, item: ir.SelItem) -> str:
        if item.key == "name":
            return f"no label or phase is named `{item.value}`"
        return f"no {item.key} is named `{item.value}`"

    def selector_hint(self, item: ir.SelItem, known: set[str]) -> str | None:
        if item.key == "name" and item.value in self.sessions:
            return f"a bare name is a label or a phase; write `session={item.value}`"
        if item.value in self.requests:
            return (f"`{item.value}` names a request (`as {item.value}`); "
                    f"give it `label {item.value}` to select it")
        flags = FLAGS if item.key == "name" else ()
        return did_you_mean(item.value, [*known, *flags])
