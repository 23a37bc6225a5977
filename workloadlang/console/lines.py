"""Plain lines: what a person sees of a run on a stream that is no terminal (or `--no-viz`).

Input: records and events as they happen, then the `Results`. Output: text on a stream.
`PlainView` prints one line per request as it completes; the summary tables (tabulate) come
after, gates first, worst sessions named. The terminal's live view is `console.live`; both end
with `summary_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from tabulate import tabulate

from workloadlang.console.format import (
    after_abort_misses,
    counters_line,
    fmt_gap,
    fmt_kind,
    fmt_pct,
    fmt_report,
    fmt_s,
    fmt_tok,
    fmt_tps,
)
from workloadlang.console.perf import performance_text
from workloadlang.plan.model import Plan
from workloadlang.results import Record, Results
from workloadlang.resultsmodels import ClientHealth
from workloadlang.theory import theory_line


def record_line(r: Record) -> str:
    """One line per completed request: where it sits (a parallel fork's branch too: `lane
    0.1`), what the engine said, what it cost."""
    where = f"{r.session} {r.phase + '/' if r.phase else ''}{r.label}[{r.index}]" + (
        f" lane {r.lane}" if r.lane else "")
    if r.skipped:
        return f"  {where:<34} skipped: {r.skipped}"
    hit = {True: "HIT ", False: "MISS", None: "    "}[r.hit]
    parts = [f"  {where:<34} {hit}", f"prompt={fmt_tok(r.prompt_tokens):>9}",
             f"cached={fmt_tok(r.cached_tokens):>9}", f"exp={fmt_tok(r.expected_cached):>9}",
             f"reuse={fmt_pct(r.reuse):>6}", f"ttft={fmt_s(r.ttft_s):>7}",
             f"pp={fmt_tps(r.pp_tps):>6}", f"tg={fmt_tps(r.tg_tps):>5}"]
    if r.aborted:
        parts.append(f"ABORTED@{r.streamed_tokens}")
    if r.expect_ok is False:
        parts.append("EXPECT-FAILED")
    if r.ttft_agrees is False:
        parts.append("TTFT-DISAGREES")
    if r.error:
        parts.append(f"err={r.error.kind}: {r.error.message[:80]}")
    if r.impossible:
        parts.append(f"IMPOSSIBLE (evidence unknown): {r.impossible[:120]}")
    return "  ".join(parts)


class PlainView:
    def __init__(self, plan: Plan, out: IO[str]):
        self.plan, self.out = plan, out

    def start(self) -> None:
        p = self.plan
        self.out.write(f"{p.workload}: {len(p.requests)} requests in {len(p.sessions)} "
                       f"session(s), concurrency {p.concurrency}, salt {p.salt}, "
                       f"plan {p.plan_hash}\n")
        self.out.flush()

    def stop(self) -> None:
        pass

    def record(self, rec: Record) -> None:
        self.out.write(record_line(rec) + "\n")
        self.out.flush()

    def event(self, kind: str, data: dict[str, Any]) -> None:
        line = event_line(kind, data)
        if line:
            self.out.write(line + "\n")
            self.out.flush()

    def summary(self, results: Any) -> None:
        self.out.write(summary_text(results))
        self.out.flush()


def event_line(kind: str, data: dict[str, Any]) -> str | None:
    """Input: an event as a `Sink` is given it (its payload a dict, as `--records` writes it; a
    distributed run's driver adds the `worker`). Output: its line, or None."""
    if kind == "note":
        return f"note: {data['message']}"
    if kind == "calibration":
        bits = [f"sizing by {data['sizing']}"]
        if data.get("tokens_per_word"):
            bits.append(f"{data['tokens_per_word']:.3f} tokens/word")
        if data.get("threshold_s") is not None:
            bits.append(f"TTFT threshold {fmt_s(data['threshold_s'])} at "
                        f"{data['threshold_tokens']:,} tokens (separation "
                        f"{data['separation']:.1f}x)")
        return "calibration: " + ", ".join(bits + data.get("notes", []))
    if kind == "metrics":
        return (f"engine counters ({data['at']}): {data['hits_tokens']:,} hit / "
                f"{data['queries_tokens']:,} queried tokens [{data['family']}]")
    return worker_line(kind, data)


def worker_line(kind: str, data: dict[str, Any]) -> str | None:
    """A worker of a sharded run (`wl run --workers`): where it runs and what it holds, or that
    it was lost."""
    sessions = ", ".join(data.get("sessions", []))
    if kind == "worker":
        return (f"worker {data['worker']}: pid {data.get('pid')} on {data.get('node')}, "
                f"sessions {sessions} (concurrency {data.get('concurrency')})")
    if kind == "worker_lost":
        return (f"worker {data['worker']} LOST, {data['reason']}: sessions {sessions} not run "
                "to their end")
    return None


def gate_rows(results: Any) -> list[list[Any]]:
    rows = []
    for g in results.gates:
        worst = [r for r in g.results if r.status != "pass"]
        detail = "; ".join(f"{r.scope}: {r.status}" + (f" ({r.detail})" if r.detail else "")
                           for r in worst[:4])
        unknown = sum(r.unknown for r in g.results if r.status != "unknown")
        if unknown:  # not known, and shown not to change the outcome
            detail = "; ".join(filter(None, [detail, f"{unknown} value(s) not known, "
                                                     "none could change it"]))
        detail = "; ".join(filter(None, [detail, not_applicable(g.results)]))
        applied = [r for r in g.results if not r.not_applicable]
        shown = worst[0] if worst else (applied or g.results)[0]
        status = g.status.upper() if g.severity == "fail" else f"{g.status.upper()} (warn)"
        counts = f"{g.exact}/{g.ranges}/{g.unknown}" + (
            f", {g.not_applicable} n/a" if g.not_applicable else "")
        rows.append([g.name, g.scope, status, fmt_kind(shown.value, g.kind),
                     fmt_kind(shown.threshold, g.kind),
                     counts, f"line {g.line}", detail or "–"])
    return rows


def not_applicable(scopes: list[Any]) -> str:
    """Output: where a gate did not apply (its `when` condition false) and why, for the gate
    table's detail; "" when it applied everywhere."""
    na = [r for r in scopes if r.not_applicable]
    if not na:
        return ""
    if len(scopes) == 1:
        return na[0].detail
    more = f" (and {len(na) - 1} more: {', '.join(r.scope for r in na[1:4])}" + (
        ", ...)" if len(na) > 4 else ")") if len(na) > 1 else ""
    return f"{na[0].scope}: {na[0].detail}{more}"


def summary_text(results: Any) -> str:
    parts = ["", "── gates ──", tabulate(gate_rows(results), headers=[
        "gate", "scope", "result", "value", "threshold", "exact/range/unknown", "source",
        "detail"],
        tablefmt="simple", disable_numparse=True)]
    if results.verdicts:
        bad = {s: v for s, v in results.verdicts.items() if v != "ok"}
        head = f"── sessions: {len(results.verdicts) - len(bad)}/{len(results.verdicts)} ok"
        parts += ["", head + (f"; worst: {', '.join(f'{s} {v}' for s, v in bad.items())}"
                              if bad else "") + " ──"]
        per_session = [g for g in results.gates if g.scope == "each session"]
        parts.append(tabulate(session_rows(results, per_session), headers=[
            "session", "verdict", "requests", "errors", "reuse (warm)", "median ttft",
            *(f"{g.name} (value / threshold)" for g in per_session)],
            tablefmt="simple", disable_numparse=True))
    if results.report:
        parts += ["", "── report ──", tabulate(report_rows(results.report, results.report_format),
                                                  tablefmt="plain", disable_numparse=True)]
    parts += performance_text(results.performance)
    counters = counters_line(results.metrics, results.engine.engine)
    theory = theory_line(results.cache_theory)
    parts += ["", *([counters] if counters else []), *([theory] if theory else []),
              footer(results), ""]
    return "\n".join(parts)


def gate_cell(g: Any, sid: str) -> str:
    r = next((r for r in g.results if r.scope == sid), None)
    if r is None:
        return "–"
    if r.not_applicable:
        return "n/a (does not apply)"
    cell = f"{fmt_kind(r.value, g.kind)} / {fmt_kind(r.threshold, g.kind)}"
    return cell if r.status == "pass" else f"{cell} {r.status.upper()}"


def session_rows(results: Any, per_session: Sequence[Any] = ()) -> list[list[Any]]:
    rows = []
    by_session: dict[str, list[Any]] = {}
    for r in results.records:
        if not r.skipped:
            by_session.setdefault(r.session, []).append(r)
    for sid, verdict in results.verdicts.items():
        rs = by_session.get(sid, [])
        warm = [r.reuse for r in rs if r.warm and r.reuse is not None]
        ttfts = sorted(r.ttft_s for r in rs if r.ttft_s is not None)
        rows.append([sid, verdict, len(rs), sum(1 for r in rs if r.error),
                     fmt_pct(sum(warm) / len(warm)) if warm else "–",
                     fmt_s(ttfts[len(ttfts) // 2]) if ttfts else "–",
                     *(gate_cell(g, sid) for g in per_session)])
    return rows


def report_rows(report: dict[str, Any], formats: dict[str, str] | None = None) -> list[list[str]]:
    rows = []
    for name, v in report.items():
        fmt = (formats or {}).get(name, "number")
        if isinstance(v, dict):
            rows.append([name, "  ".join(f"{k}: {fmt_report(x, fmt)}" for k, x in v.items())])
        else:
            rows.append([name, fmt_report(v, fmt)])
    return rows


def verdict_word(results: Any) -> str:
    """Output: the summary line's first word, with why when it is not a pass (docs/cli.md, exit
    codes): `PASS`, `FAIL (a gate failed: NAMES)`, `UNVERIFIED (no gate failed; NAME could not
    be judged in N of M scope(s); ...)`, `INCOMPLETE`, `INTERRUPTED`."""
    code = results.exit_code
    bad = [g for g in results.gates if g.severity == "fail" and g.status != "pass"]
    if code == 1:
        names = ", ".join(g.name for g in bad if g.status == "fail")
        return f"FAIL (a gate failed: {names})" if names else "FAIL (a gate failed)"
    if code == 6:
        return "UNVERIFIED (no gate failed; " + "; ".join(
            f"{g.name} {unjudged(g)}" for g in bad) + ")"
    return {0: "PASS", 4: "INCOMPLETE", 130: "INTERRUPTED"}.get(code, str(code))


def unjudged(g: Any) -> str:
    """Output: why a gate was not judged, in a few words: `could not be judged in N of M
    scope(s)`, `not decidable at these sizes in N of M scope(s)`, or both."""
    small = [r for r in g.results if r.status == "undecidable"]
    unknown = [r for r in g.results if r.status == "unknown"]
    parts = ([f"could not be judged in {len(unknown)} of {len(g.results)} scope(s)"]
             if unknown else []) + ([f"not decidable at these sizes in {len(small)} of "
                                     f"{len(g.results)} scope(s)"] if small else [])
    return ", ".join(parts)


def moved_by(client: ClientHealth) -> str:
    """Output: which verdicts a client that was a bottleneck could have moved, for the footer
    (`gates_client_could_move`)."""
    moved = client.gates_client_could_move
    if moved is None:
        return ""
    if moved:
        return f"; its load could have moved the gates {', '.join(moved)}"
    return ("; no fail gate reads a time it measured while busy (they read requests timed "
            "alone, sent once it was quiet, or the engine's own counts and times)")


def footer(results: Results) -> str:
    line = f"{verdict_word(results)} · {results.workload} · " \
           f"{len(results.records)} requests in {results.elapsed_s:.1f}s · salt {results.salt}"
    if results.incomplete:
        line += f" · incomplete: {results.incomplete}"
    return line + client_notes(results.client) + record_notes(results)


def client_notes(client: ClientHealth) -> str:
    """Output: the footer's notes on the client's health: a bottleneck (which workers), requests
    sent late or late against their plan, measurements taken again, late first-token stamps."""
    line = ""
    if client.bottleneck_workers:
        line += (" · NOTE: worker(s) " + ", ".join(map(str, client.bottleneck_workers))
                 + " were a bottleneck (see client.workers in the results)" + moved_by(client))
    elif client.client_bottleneck:
        line += " · NOTE: the client was a bottleneck (see client in the results)" \
            + moved_by(client)
    elif client.client_delay_over_10ms:
        longest = client.client_delay_max_ms
        upto = f", up to {longest:.1f} ms" if longest is not None else ""
        line += (f" · NOTE: the client sent {client.client_delay_over_10ms} request(s) more"
                 f" than 10 ms after they were due{upto} (see client in the results)")
    if client.schedule_late:
        line += (f" · NOTE: {client.schedule_late} request(s) were sent more than 10 ms "
                 f"after their planned time (lag p99 {client.schedule_lag_p99_ms or 0:.1f} ms, "
                 f"up to {client.schedule_lag_max_ms or 0:.1f} ms; schedule_lag_s): the load "
                 "came later than planned, and a verdict that rests on it may be too kind")
    if client.remeasured_requests:
        line += (f" · NOTE: {client.remeasured_requests} decisive measurement(s) were "
                 f"measured again alone ({client.remeasures} more send(s), "
                 f"{client.remeasure_s or 0:.1f}s): a time that was a range or ran at "
                 "another speed than its stretch's first (records' `remeasured`)")
    if client.stretches_again:
        line += (f" · NOTE: {client.stretches_again} stretch(es) timed alone were measured "
                 f"again whole, their sub-agents first ({client.stretches_again_kept or 0} "
                 "kept): the first request ran at another speed than the requests that price "
                 "it (records' `remeasured`)")
    late, most = client.ttft_late, client.ttft_late_max_ms
    if late:
        upto = f" up to {most:.1f} ms" if most is not None else ""
        line += (f" · NOTE: {late} first token(s) came in one read with more of the stream:"
                 f" their TTFT may be{upto} too long (ttft_late_s)")
    return line


def record_notes(results: Results) -> str:
    """Output: the footer's notes on the records: counts no engine can report, misses that
    came right after an abort they extend."""
    line = ""
    impossible = [(r.id, r.impossible) for r in results.records if r.impossible]
    if impossible:
        rid, why = impossible[0]
        line += (f" · NOTE: {len(impossible)} request(s) reported counts no engine can (e.g. "
                 f"{rid}: {why[:80]}): their cache evidence is unknown")
    raced = after_abort_misses(results.records, results.engine.slots)
    if raced:
        least, most_gap = fmt_gap(min(g for _, g in raced)), fmt_gap(max(g for _, g in raced))
        span = least if least == most_gap else f"{least} to {most_gap}"
        line += (f" · NOTE: {len(raced)} miss(es) came {span} after the aborted "
                 f"request they extend was closed: an engine that runs several requests at "
                 f"once may not have processed the disconnect yet and put the request in "
                 f"another slot (a longer settle wait tells; docs/engines-llama.md)")
    return line
