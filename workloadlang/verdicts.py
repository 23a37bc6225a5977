"""What the gates' results say of a run: each session's verdict, the run's exit code, and which
gates a client that was a bottleneck could have moved.

Input: the plan, the `GateResult`s (`gates.evaluate_gates`), for the last the records. Output:
per-session verdict labels, an `ExitCode`, gate names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloadlang.plan.model import Plan
from workloadlang.results import ExitCode, GateResult, Record
from workloadlang.selector import gate_metric_refs, select


def session_verdicts(plan: Plan, gates: list[GateResult]) -> dict[str, str]:
    """Per session: the verdict labels of its failed fail-severity per-session gates,
    `unverified` when one could not be judged, `undecidable` when one could not at these sizes
    and nothing else was found, else `ok`. Warnings show in the gate table, not in the
    verdict."""
    out = {}
    for s in plan.sessions:
        labels = []
        for g in (g for g in gates if g.severity == "fail"):
            for r in g.results:
                if r.scope != s.id:
                    continue
                if r.status == "fail":
                    labels.append(g.verdict or g.name)
                elif r.status == "unknown":
                    labels.append("unverified")
                elif r.status == "undecidable":
                    labels.append("undecidable")
        if len(labels) > labels.count("undecidable"):  # a finding says more than a size
            labels = [x for x in labels if x != "undecidable"]
        if any(g.scope == "each session" and any(r.scope == s.id for r in g.results)
               for g in gates):
            out[s.id] = ", ".join(dict.fromkeys(labels)) or "ok"
    return out


def failed(gates: list[GateResult]) -> list[GateResult]:
    """Fail-severity gates that did not pass (fail or could not be judged)."""
    return [g for g in gates if g.severity == "fail" and g.status != "pass"]


def verdict_code(gates: list[GateResult]) -> ExitCode:
    """Output: the exit code the gates give a complete run: `GATE` when a fail-severity gate
    failed, else `UNVERIFIED` when one could not be judged (unknown, or undecidable at these
    sizes), else `OK`."""
    bad = failed(gates)
    if any(g.status == "fail" for g in bad):
        return ExitCode.GATE
    return ExitCode.UNVERIFIED if bad else ExitCode.OK


# what the client's own clock measured: a busy client can make them longer (the engine's own
# prefill time and counts it cannot)
CLIENT_TIMED = frozenset({"ttft", "ttft_content", "e2e", "tg", "schedule_lag", "isolation_wait"})
CLIENT_TTFT = frozenset({"prefill_time", "pp", "ttft_per_uncached", "ttft_agrees",
                         "ttft_disagrees"})


def client_could_move(plan: Plan, records: list[Record], env: Mapping[str, Any]) -> list[str]:
    """Output: the fail-severity gates that read a time the client measured (its clock, or a
    prefill time that is its TTFT) of a request not timed alone: when the client was a
    bottleneck, its load could have moved them. A request timed alone (`isolated`) waits for
    the client to be quiet (`ClientHealth.quiet`) and is read by a thread that runs first."""
    by_id = plan.by_id()
    out = []
    for gp in plan.gates:
        refs = [ref for ref in gate_metric_refs(gp.gate)
                if ref.metric in CLIENT_TIMED or ref.metric in CLIENT_TTFT]
        if gp.gate.severity == "fail" and any(
                not r.isolated and (ref.metric in CLIENT_TIMED or r.prefill_source == "client_ttft")
                for ref in refs for r in select(records, ref.selector, env, lambda r: by_id[r.id])):
            out.append(gp.gate.name)
    return out
