"""Synthetic results of each benchmark kind, for the report's tests, benchmark and docs.

Input: a few sizes (sessions, steps, runs...) and the outcome to fake (which sessions lose their
cache, which contexts are retained). Output: `Results` objects shaped like the runner's, built
by hand: ids, labels, prefix sources and derived fields follow the planner and `record.py`.
Not used by `wl report` itself; real-run tests use `wl run --sim` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workloadlang.report.source import read_source
from workloadlang.results import ErrorDetail, GateResult, Record, Results, ScopeResult
from workloadlang.resultsmodels import (
    Calibration,
    ClientHealth,
    EngineSummary,
    MetricsSummary,
    ParamValue,
    ReportValue,
)
from workloadlang.verdicts import verdict_code

SYSTEM = 12  # tokens of the system prompt and chat template


def record(**kw: Any) -> Record:
    """A `Record` with the planner's required fields defaulted. Output: the record."""
    base = dict(session="main#1", phase="", label="turn", index=0, kind="reply", line=1,
                planned_prompt_tokens=kw.get("prompt_tokens") or 0, planned_expected_cached=0,
                new_tokens=0, max_tokens=1)
    base.update(kw)
    return Record(**base)


def warm(prompt: int, expected: int, cached: int | None, hit_ratio: float = 0.9,
         source: str = "plan") -> dict[str, Any]:
    """The derived cache fields of a request that expects `expected` cached tokens."""
    reuse = None if cached is None or not expected else min(1.0, cached / expected)
    return dict(prompt_tokens=prompt, cached_tokens=cached,
                cached_source="usage.prompt_tokens_details.cached_tokens",
                expected_cached=expected, expected_source=source, reuse=reuse,
                missed=None if cached is None else max(0, expected - cached),
                uncached_tokens=None if cached is None else prompt - cached,
                hit=None if reuse is None else reuse >= hit_ratio,
                hit_basis=None if reuse is None else "cached", ttft_agrees=True)


def gate_line(source: str, name: str) -> int:
    """The line of gate `name` in the bundled workload `source` (1 when not found)."""
    text = read_source(source) or ""
    for i, line in enumerate(text.splitlines()):
        if re.match(rf"\s*{re.escape(name)}:\s*(overall|each)", line):
            return i + 1
    return 1


def gate(name: str, status: str, value: Any = None, threshold: Any = None, *, line: int = 0,
         severity: str = "fail", verdict: str | None = None,
         scopes: Iterable[tuple[str, str, Any]] = ()) -> GateResult:
    """An overall gate, or a per-session one when `scopes` ((scope, status, value)...); line 0
    is filled in by `results` from the bundled workload."""
    sc = list(scopes)
    results = ([ScopeResult(scope=s, status=st, value=v, threshold=threshold, reads=1)
                for s, st, v in sc] if sc else
               [ScopeResult(scope="overall", status=status, value=value, threshold=threshold,
                            reads=1)])
    return GateResult(name=name, scope="each session" if sc else "overall", severity=severity,
                      verdict=verdict, line=line, status=status, results=results)


def results(workload: str, source: str, records: list[Record], *, gates: list[GateResult],
            params: dict[str, ParamValue], verdicts: dict[str, str] | None = None,
            calibration: Calibration | None = None,
            report: dict[str, ReportValue] | None = None,
            started_at: str = "2025-01-01T12:00:00+00:00") -> Results:
    """Wrap records into a `Results` with a simulator engine block."""
    gates = [g if g.line else g.model_copy(update={"line": gate_line(source, g.name)})
             for g in gates]
    return Results(
        workload=workload, source=source, params=params, salt="5a1t0001",
        plan_hash="sha256:" + "0123456789abcdef" * 4,
        engine=EngineSummary(base_url="http://127.0.0.1:8000/v1", model="sim-model",
                             engine="sim", max_context=131072, sim=True),
        started_at=started_at,
        elapsed_s=max((r.t_start_s or 0) + (r.e2e_s or 0) for r in records) if records else 0,
        hit_ratio=0.9, calibration=calibration or Calibration(), metrics=MetricsSummary(),
        client=ClientHealth(), incomplete=None,
        exit_code=verdict_code(gates),
        gates=gates, verdicts=verdicts or {}, report=report or {}, records=records)


# ---------------------------------------------------------------- retention


def retention(contexts: int = 12, ctx_tokens: int = 8192, kv_size: int = 65536,
              retained: int = 7, threshold_s: float = 0.25, **kw: Any) -> Results:
    """cache-pressure: hydrate `contexts`, verify newest first until the first miss (the
    first `retained` are hits); later verifies are skipped."""
    recs, t, seq = [], 0.0, 0
    prompt = ctx_tokens + SYSTEM
    for i in range(contexts):
        recs.append(record(id=f"main#1/hydrate/ctx/{i}", seq=seq, phase="hydrate", label="ctx",
                           index=i, kind="probe", line=29, planned_prompt_tokens=ctx_tokens,
                           t_start_s=t, ttft_s=0.8, e2e_s=0.81, completion_tokens=1,
                           **warm(prompt, 0, 0)))
        t, seq = t + 0.82, seq + 1
    for j, i in enumerate(reversed(range(contexts))):
        rid = f"main#1/verify/verify/{i}"
        common = dict(id=rid, seq=seq, phase="verify", label="verify", index=i, kind="resend",
                      line=35, planned_prompt_tokens=ctx_tokens,
                      planned_expected_cached=ctx_tokens - 1,
                      prefix_source=f"main#1/hydrate/ctx/{i}")
        seq += 1
        if j > retained:
            recs.append(record(**common, skipped="until miss"))
            continue
        hit = j < retained
        ttft = 0.04 + 0.01 * (j % 3) if hit else 0.78
        recs.append(record(**common, t_start_s=t, ttft_s=ttft, e2e_s=ttft + 0.01,
                           **warm(prompt, prompt - 1, prompt - 1 if hit else 0,
                                  source=f"engine:main#1/hydrate/ctx/{i}")))
        t += ttft + 0.02
    ok = retained * prompt >= kv_size
    return results("cache_pressure", "cache-pressure.wl", recs, params={
        "kv_size": kv_size, "context_tokens": ctx_tokens, "margin": 5, "num_contexts": contexts,
        "max_tokens_hydrate": 1, "max_tokens_verify": 1},
        calibration=Calibration(threshold_s=threshold_s, threshold_tokens=ctx_tokens,
                                cold_ttft_s=[0.8, 0.79, 0.81], hit_ttft_s=[0.04, 0.05, 0.04]),
        gates=[gate("no_errors", "pass", 0, 0, verdict="error"),
               gate("overflowed", "pass", contexts * prompt, kv_size, severity="warn",
                    verdict="not_overflowed"),
               gate("retained", "pass" if ok else "fail", retained * prompt, kv_size,
                    severity="warn", verdict="below_capacity")],
        report={"retained_contexts": retained, "retained_tokens": retained * prompt}, **kw)


# ---------------------------------------------------------------- agent sessions


def agent(sessions: int = 3, steps: int = 10, subs: int = 2, step_tokens: int = 5000,
          evicted: Iterable[int] = (2,), **kw: Any) -> Results:
    """agent-sim: per session a main context grown `steps` times, `subs` cold sub-agents, then
    a finalize turn; sessions in `evicted` (1-based) lose the main context to the sub-agents."""
    evicted, recs = set(evicted), list[Record]()
    for s in range(1, sessions + 1):
        recs += agent_session(s, steps, subs, step_tokens, s in evicted, len(recs))
    recs.sort(key=lambda r: r.t_start_s or 0)
    recs = [r.model_copy(update={"seq": k}) for k, r in enumerate(recs)]
    verdicts = {f"main#{s}": "evicted" if s in evicted else "ok" for s in range(1, sessions + 1)}
    scopes = [(sid, "fail" if v != "ok" else "pass", v == "ok") for sid, v in verdicts.items()]
    return results("agent_sim", "agent-sim.wl", recs, params={
        "sessions": sessions, "main_tokens": steps * step_tokens, "step_tokens": step_tokens,
        "sub_tokens": 40000, "sub_windows": subs, "finalize_tokens": 2000, "max_tokens": 64,
        "miss_threshold": 0.66, "ttft_ratio": 1.75, "max_concurrency": sessions,
        "thinking": False},
        gates=[gate("survival", "fail" if evicted else "pass", verdict="evicted", scopes=scopes),
               gate("speed", "pass", threshold=1.75, verdict="degraded",
                    scopes=[(sid, "pass", 1.1) for sid in verdicts]),
               gate("main_reuse", "pass", 1.0, 0.9, severity="warn",
                    verdict="main_evicted")],
        verdicts=verdicts, report={"finalize_survival": 1 - len(evicted) / sessions}, **kw)


def agent_session(s: int, steps: int, subs: int, step: int, evicted: bool,
                  seq0: int) -> list[Record]:
    """One agent session's requests, timed from a small per-session offset."""
    sid, out, t, prompt = f"main#{s}", list[Record](), 0.03 * s, SYSTEM
    prev: str | None = None  # the id of the request before
    for k in range(steps):
        expected = prompt + 64 if prev else 0
        prompt += step + (64 if prev else 0)
        ttft = (prompt - expected) * 8e-6 + prompt * 2e-7
        rid = f"{sid}/main/{k}"
        out.append(record(id=rid, seq=seq0 + len(out), session=sid, label="main", index=k,
                          line=30, planned_prompt_tokens=prompt, max_tokens=64, prefix_source=prev,
                          planned_expected_cached=expected,
                          t_start_s=t, ttft_s=ttft, e2e_s=ttft + 64 * 2e-4, completion_tokens=64,
                          pp_tps=(prompt - expected) / ttft, tg_tps=63 / (64 * 2e-4),
                          **warm(prompt, expected, expected)))
        t, prev = t + ttft + 64 * 2e-4 + 0.002, rid
    for j in range(subs):
        ttft = 40000 * 8e-6
        out.append(record(id=f"{sid}/sub/{j}", seq=seq0 + len(out), session=sid, label="sub",
                          index=j, line=34, planned_prompt_tokens=40000, t_start_s=t,
                          ttft_s=ttft, e2e_s=ttft + 0.013, **warm(40000 + SYSTEM, 0, 0)))
        t += ttft + 0.015
    expected = prompt + 64
    cached = 1024 if evicted else expected
    ttft = (prompt + 2000 - cached) * 8e-6
    out.append(record(id=f"{sid}/finalize/0", seq=seq0 + len(out), session=sid,
                      label="finalize", line=39, planned_prompt_tokens=prompt + 2064,
                      planned_expected_cached=expected,
                      prefix_source=prev, t_start_s=t, ttft_s=ttft, e2e_s=ttft + 0.013,
                      **warm(prompt + 2064, expected, cached, source=f"engine:{prev}")))
    return out


# ---------------------------------------------------------------- perf


def perf(runs: int = 3, steps: int = 8, step_tokens: int = 10000, slower: float = 1.0,
         **kw: Any) -> Results:
    """perf-sim: `runs` fresh conversations grown `steps` times; speeds fall with context
    (`slower` > 1 makes this engine slower, for before/after overlays)."""
    recs: list[Record] = []
    t = 0.0
    for run in range(runs):
        prev, prompt = None, SYSTEM
        for k in range(steps):
            expected = prompt + 256 if prev else 0
            prompt += step_tokens + (256 if prev else 0)
            pp = 9000 / (1 + prompt / 60000) / slower * (1 + 0.03 * ((run + k) % 3 - 1))
            tg = 60 / (1 + prompt / 150000) / slower * (1 + 0.02 * ((run * 7 + k) % 3 - 1))
            ttft = (prompt - expected) / pp
            rid = f"main#1/level/{k}" + (f".{run}" if run else "")
            recs.append(record(id=rid, seq=len(recs), label="level", index=k, line=26,
                               max_tokens=256, planned_prompt_tokens=prompt, prefix_source=prev,
                               planned_expected_cached=expected,
                               t_start_s=t, ttft_s=ttft, e2e_s=ttft + 255 / tg,
                               completion_tokens=256, pp_tps=pp, tg_tps=tg,
                               **warm(prompt, expected, expected)))
            t, prev = t + ttft + 255 / tg, rid
    return results("perf_sim", "perf-sim.wl", recs, params={
        "step_tokens": step_tokens, "output_tokens": 256, "runs": runs,
        "context_limit": steps * (step_tokens + 256) + 400, "steps": steps, "thinking": False},
        gates=[gate("completed", "pass", 0, 0, verdict="incomplete")], **kw)


# ---------------------------------------------------------------- abort


def abort(runs: int = 2, kept: Iterable[bool] = (True, False), context: int = 40000,
          streamed: int = 500, **kw: Any) -> Results:
    """abort-sim: per run a prime aborted after `streamed` tokens, then a re-prompt; `kept[i]`
    says whether run i's cache kept the prefix and the partial turn."""
    kept, recs, t = list(kept), list[Record](), 0.0
    for run in range(runs):
        keep = kept[run % len(kept)] if kept else True
        prime = f"main#1/prime/{run}"
        prompt = context + 80 + SYSTEM
        recs.append(record(id=prime, seq=len(recs), label="prime", index=run, line=25,
                           max_tokens=32768, abort_after=streamed, planned_prompt_tokens=prompt,
                           t_start_s=t, ttft_s=0.2, e2e_s=0.2 + streamed * 5e-4, aborted=True,
                           streamed_tokens=streamed, finish_reason=None,
                           **warm(prompt, 0, 0)))
        t += 0.2 + streamed * 5e-4 + 0.5
        rprompt = prompt + streamed + 40
        expected = prompt + streamed
        cached = expected if keep else prompt - 16
        recs.append(record(id=f"main#1/reprompt/{run}", seq=len(recs), label="reprompt",
                           index=run, kind="probe", line=30, planned_prompt_tokens=rprompt,
                           planned_expected_cached=expected,
                           prefix_source=prime, t_start_s=t, ttft_s=0.02 if keep else 0.1,
                           e2e_s=0.03, completion_tokens=1,
                           **warm(rprompt, expected, cached, hit_ratio=0.95,
                                  source=f"engine:{prime}")))
        t += 0.1
    ok = all(kept[r % len(kept)] for r in range(runs)) if kept else True
    return results("abort_sim", "abort-sim.wl", recs, params={
        "context_tokens": context, "thinking_tokens": streamed, "max_tokens": 32768,
        "reprompt_max_tokens": 1, "reprompt_mode": "branch", "runs": runs, "min_reuse": 0.95,
        "settle": 0.5},
        gates=[gate("aborted", "pass", True, verdict="not_aborted"),
               gate("reuse", "pass" if ok else "fail", 1.0 if ok else 0.987, 0.95,
                    verdict="prefix_lost"),
               gate("partial_kept", "pass" if ok else "fail", 0 if ok else 516, 250.0,
                    severity="warn", verdict="partial_lost")], **kw)


# ---------------------------------------------------------------- needles


def needles(lengths: Iterable[int] = (50000, 100000, 200000, 300000, 450000),
            window: int = 150000, reply: str | None = None, depth: float = 0.8,
            **kw: Any) -> Results:
    """needle-test: a needle found when the haystack is at most `window` tokens; `reply`
    replaces the model's answer (to test that it is shown as text)."""
    recs, t = [], 0.0
    for k, n in enumerate(lengths):
        found = n <= window
        text = reply if reply is not None else "[plover-4821]" if found else "[zirconium-4821]"
        recs.append(record(id=f"main#1/needle/{k}", seq=k, label="needle", index=k, line=19,
                           max_tokens=128, planned_prompt_tokens=n, t_start_s=t,
                           ttft_s=n * 1e-6, e2e_s=n * 1e-6 + 0.5, completion_tokens=8,
                           reply_excerpt=text, expect_ok=found, **warm(n + 40, 0, 0)))
        t += n * 1e-6 + 0.5
    nfound = sum(1 for r in recs if r.expect_ok)
    return results("needle_test", "needle-test.wl", recs, params={
        "lengths": list(lengths), "needle_pos": depth, "max_tokens": 128, "thinking": False},
        gates=[gate("found", "pass" if nfound == len(recs) else "fail", nfound == len(recs),
                    line=24, verdict="not_found")],
        report={"needles_found": nfound, "needles": len(recs)}, **kw)


def with_error(res: Results, index: int, message: str) -> Results:
    """A copy of `res` whose `index`-th record errored with `message`."""
    recs = list(res.records)
    recs[index] = recs[index].model_copy(update={
        "error": ErrorDetail(kind="http", message=message, status=500), "hit": None,
        "reuse": None, "cached_tokens": None, "expect_ok": False})
    return res.model_copy(update={"records": recs})
