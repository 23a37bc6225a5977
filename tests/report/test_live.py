"""The live view: the pure state updates and frame renderer (rendered to text at fixed widths),
and a `LiveView` fed records end to end into a StringIO with an injected clock."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from workloadlang.console import live
from workloadlang.console.live import (
    LiveView,
    apply_event,
    apply_record,
    bar,
    render_state,
    state_from_plan,
)
from workloadlang.ir import Span
from workloadlang.plan.model import Plan, PRequest, SessionInfo, Totals
from workloadlang.results import ErrorDetail, Record, Results
from workloadlang.resultsmodels import ClientHealth, EngineSummary, MetricsSummary
from workloadlang.run.record import base_record

SPAN = Span(file="t.wl", line=1, col=1, end_line=1, end_col=2)
# the session copy's field (being renamed from `copy`, which shadows BaseModel.copy)
COPY = "copy_index" if "copy_index" in PRequest.model_fields else "copy"


def agent_plan(sessions: int = 1, steps: int = 4, subs: int = 2, hit_ratio: float = 0.9,
               phases: tuple[str, ...] = ()) -> Plan:
    """Each session: `steps` growing main turns (5k each, warm after the first), `subs` cold
    40k sub-agents and a finalize turn. Peak: the sub-agent, 40k + 64."""
    reqs, infos = [], []
    for k in range(1, sessions + 1):
        sid = f"s{k}"
        mine = [("main", i, 5000 * (i + 1), 5000 * i) for i in range(steps)]
        mine += [("sub", i, 40000, 0) for i in range(subs)]
        mine.append(("finalize", 0, 5000 * steps + 2000, 5000 * steps))
        for label, i, prompt, exp in mine:
            reqs.append(PRequest(
                id=f"{sid}/{label}/{i}", seq=len(reqs), session=sid, session_name="s", **{COPY: k},
                phase=phases[0] if phases else "", label=label, index=i, kind="reply",
                last_message=None, new_tokens=prompt - exp, prompt_tokens=prompt, expected_cached=exp,
                max_tokens=64, span=SPAN))
        infos.append(SessionInfo(id=sid, name="s", requests=len(mine), peak_tokens=0, **{COPY: k}))
    totals = Totals(requests=len(reqs), prompt_tokens=0, cold_tokens=0, expected_cached_tokens=0,
                    max_tokens=0, peak_inflight_tokens=0, working_set_tokens=0)
    return Plan(workload="agent_sim", doc="", source="agent-sim.wl", params={}, salt="s1",
                plan_hash="h1", concurrency=2, timeout_s=60, fail_fast=False, hit_ratio=hit_ratio,
                max_context=None, phases=phases, sessions=tuple(infos), messages=(),
                requests=tuple(reqs), calibrations=(), gates=(), report=(), totals=totals)


def rec(req: PRequest, *, reuse: float | None = None, hit: bool | None = None,
        pp: float | None = None, tg: float | None = None, error: str | None = None,
        skipped: str | None = None, aborted: bool = False, prompt: int | None = None) -> Record:
    d = base_record(req)
    if skipped:
        return Record(**d, skipped=skipped)
    return Record(**d, prompt_tokens=prompt if prompt is not None else req.prompt_tokens,
                  reuse=reuse, hit=hit, pp_tps=pp, tg_tps=tg, aborted=aborted,
                  error=None if error is None else ErrorDetail(kind=error, message="boom"))


def text_of(state, width: int, styles: bool = False) -> str:
    console = Console(record=True, width=width, force_terminal=True, color_system="standard",
                      file=io.StringIO())
    console.print(render_state(state, width))
    return console.export_text(styles=styles)


def lines_with(text: str, needle: str) -> list[str]:
    return [ln for ln in text.splitlines() if needle in ln]


# ---------------------------------------------------------------- bars and layout


def test_bar_fills_proportionally_and_clamps() -> None:
    assert bar(0.5, 20).plain == "█" * 10 + "░" * 10
    assert bar(0.0, 8).plain == "░" * 8
    assert bar(1.7, 8).plain == "█" * 8
    assert bar(-1, 8).plain == "░" * 8
    assert bar(0.5 + 1 / 32, 8).plain == "████▎░░░"  # a quarter cell: two eighths, "▎"
    assert all(len(bar(f / 13, 17).plain) == 17 for f in range(14))


def test_one_session_narrow_and_wide() -> None:
    state = state_from_plan(agent_plan(sessions=1))
    for width in (44, 160):
        out = text_of(state, width)
        assert "agent_sim · 1 session · 00:00 · 0/7 requests" in out
        assert len(lines_with(out, "s1")) == 1
        assert "step 0/7" in out and "main 0/4 · sub 0/2 · finalize 0/1" in out
        assert max(len(ln) for ln in out.splitlines()) <= width


def test_four_sessions_side_by_side_when_wide_stacked_when_narrow() -> None:
    state = state_from_plan(agent_plan(sessions=4))
    wide = text_of(state, 160)
    row = lines_with(wide, "╭─ s1")
    assert len(row) == 1 and all(f"╭─ s{k} " in row[0] for k in (2, 3, 4))
    narrow = text_of(state, 60)
    for k in range(1, 5):
        assert len(lines_with(narrow, f"╭─ s{k} ")) == 1
    assert not any(ln.count("╭─") > 1 for ln in narrow.splitlines())
    # 80 columns still fit two per row
    middle = text_of(state, 80)
    assert sum(ln.count("╭─") for ln in middle.splitlines()) == 4
    assert any(ln.count("╭─") == 2 for ln in middle.splitlines())


# ---------------------------------------------------------------- numbers from records


def test_progress_context_reuse_speeds_and_errors() -> None:
    plan = agent_plan(sessions=1)
    by = plan.by_id()
    state = state_from_plan(plan)
    s = state.sessions["s1"]
    assert s.peak_tokens == 40064 and s.main_label == "main"
    apply_record(state, rec(by["s1/main/0"], pp=2000, tg=40))  # cold: no reuse figure
    apply_record(state, rec(by["s1/main/1"], reuse=1.0, hit=True, pp=12400, tg=46))
    apply_record(state, rec(by["s1/main/2"], reuse=0.5, hit=False, pp=None, tg=None))
    apply_record(state, rec(by["s1/sub/0"], error="http", prompt=None))
    apply_record(state, rec(by["s1/sub/1"], aborted=True))
    assert (s.done, s.warm, s.hits, s.misses, s.errors, s.aborted) == (5, 2, 1, 1, 1, 1)
    assert s.reuse == pytest.approx(0.75)
    out = text_of(state, 60)
    assert "reuse 75.0% · 1 hit · 1 miss" in out
    assert "main 3/4 · sub 2/2 · finalize 0/1" in out
    assert "sub[1]  step 5/7" in out
    assert "pp 12.4k · tg 46 tok/s" in out  # the last known speeds, not wiped by a None
    assert "err 1 (http) · aborted 1" in out
    assert "40k/40k" in out  # the sub-agent's 40,000 of the 40,064 peak
    assert "5/7 requests" in out and "1 error" in out


def test_context_bar_tracks_the_latest_prompt() -> None:
    plan = agent_plan(sessions=1, subs=0)  # peak: finalize 22,000 + 64
    state = state_from_plan(plan)
    apply_record(state, rec(plan.by_id()["s1/main/1"], prompt=11032))  # half of 22,064
    out = text_of(state, 60)
    line = lines_with(out, "ctx ")[0]
    cells = re.search(r"ctx ([█▏▎▍▌▋▊▉░]+) 11k/22k", line)
    assert cells, line
    filled = cells.group(1).count("█")
    assert filled == len(cells.group(1)) // 2


def test_skipped_records_count_as_done_but_do_not_move_the_position() -> None:
    plan = agent_plan(sessions=1)
    by = plan.by_id()
    state = state_from_plan(plan)
    apply_record(state, rec(by["s1/main/1"], reuse=1.0, hit=True))
    apply_record(state, rec(by["s1/main/3"], skipped="until: seen"))
    s = state.sessions["s1"]
    assert (s.done, s.skipped, s.label, s.index) == (2, 1, "main", 1)
    assert "skipped 1" in text_of(state, 60)


def test_reuse_colour_follows_the_plans_hit_ratio() -> None:
    def coloured(hit_ratio: float) -> str:
        plan = agent_plan(sessions=1, hit_ratio=hit_ratio)
        state = state_from_plan(plan)
        apply_record(state, rec(plan.by_id()["s1/main/1"], reuse=0.9, hit=hit_ratio <= 0.9))
        return text_of(state, 60, styles=True)

    green, red = "\x1b[1;32m90.0%", "\x1b[1;31m90.0%"
    assert green in coloured(0.85) and red not in coloured(0.85)
    assert red in coloured(0.95) and green not in coloured(0.95)
    assert green in coloured(0.90)  # at the ratio counts as reaching it


def test_verdicts_phase_and_engine_counters_from_events() -> None:
    plan = agent_plan(sessions=2, phases=("warmup", "load"))
    state = state_from_plan(plan)
    state.started_at, state.now = 10.0, 20.0
    apply_event(state, "plan", {})
    assert state.stage == "calibrating"
    apply_event(state, "metrics", {"at": "start", "hits_tokens": 100, "queries_tokens": 1000})
    apply_event(state, "metrics", {"at": "end", "hits_tokens": 850, "queries_tokens": 2000})
    for r in plan.requests:
        apply_record(state, rec(r))
    apply_event(state, "gate", {})
    judging = text_of(state, 140)
    assert "done · judging" in judging and "phase warmup (1/2)" in judging
    assert "engine 75.0% of queried tokens hit" in judging
    apply_event(state, "summary", {"exit_code": 1, "verdicts": {"s1": "ok", "s2": "evicted"}},
                now=95.0)
    state.now = 500.0  # the clock runs on; the elapsed time stays frozen at the summary
    final = text_of(state, 100)
    assert "✓ ok" in final and "✗ evicted" in final and "01:25" in final and "· done" in final


def test_many_sessions_show_the_interesting_ones_and_count_the_rest() -> None:
    plan = agent_plan(sessions=20, steps=2, subs=0)
    state = state_from_plan(plan)
    apply_record(state, rec(plan.by_id()["s17/main/0"], error="timeout"))
    for r in plan.requests:
        if r.session == "s3":
            apply_record(state, rec(r))
    out = text_of(state, 200)
    assert sum(ln.count("╭─") for ln in out.splitlines()) == live.MAX_PANELS
    assert "╭─ s17 " in out  # the erroring session is never hidden
    assert "+ 8 more sessions: 1 done, 0 running, 7 waiting" in out


# ---------------------------------------------------------------- the view end to end


def results_for(plan: Plan, records: list[Record]) -> Results:
    return Results(workload=plan.workload, source=plan.source, params={}, salt=plan.salt,
                   plan_hash=plan.plan_hash, engine={}, started_at="2024-01-01T00:00:00+00:00",
                   elapsed_s=21.0, hit_ratio=plan.hit_ratio, calibration={}, metrics={},
                   client={}, incomplete=None, exit_code=1, gates=[],
                   verdicts={"s1": "ok", "s2": "evicted"}, report={"main_reused": 6},
                   records=records)


def test_live_view_end_to_end_into_a_stringio() -> None:
    plan = agent_plan(sessions=2)
    out = io.StringIO()
    now = [100.0]
    view = LiveView(plan, out, clock=lambda: now[0], width=100)
    view.start()
    view.event("plan", {"workload": plan.workload})
    view.event("calibration", {"sizing": "tokenize", "notes": []})
    records = []
    for r in plan.requests:
        now[0] += 1.5
        warm = r.expected_cached > 0
        records.append(rec(r, reuse=1.0 if warm else None, hit=True if warm else None, pp=900,
                           tg=50, error="http" if r.id == "s2/sub/1" else None))
        view.record(records[-1])
    view.event("summary", {"exit_code": 1, "verdicts": {"s1": "ok", "s2": "evicted"}})
    view.stop()
    view.stop()  # idempotent
    view.summary(results_for(plan, records))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "╭─ s1 " in text and "╭─ s2 " in text
    assert "✓ ok" in text and "✗ evicted" in text
    assert "agent_sim · 2 sessions · 00:21 · 14/14 requests" in text  # 14 × 1.5 s
    assert "calibration: sizing by tokenize" in text  # events stay above the live area
    assert "s2 sub[1]" in text  # the errored request's line stays on screen
    assert "── sessions: 1/2 ok; worst: s2 evicted ──" in text  # the plain summary follows
    assert "main_reused" in text


def test_recording_does_not_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawing happens on rich's refresh thread at a bounded rate, never per record."""
    calls = []
    real = live.render_state
    monkeypatch.setattr(live, "render_state", lambda *a: calls.append(1) or real(*a))
    plan = agent_plan(sessions=50, steps=40, subs=0)
    view = LiveView(plan, io.StringIO(), width=120, refresh_per_second=4)
    view.start()
    for r in plan.requests:
        view.record(rec(r, reuse=1.0, hit=True))
    view.stop()
    assert len(plan.requests) > 2000 and 1 <= len(calls) < 100


def test_the_footer_says_when_first_token_stamps_may_be_late() -> None:
    from workloadlang.console.lines import footer

    plan = agent_plan(sessions=2)
    quiet = results_for(plan, [])
    assert "first token" not in footer(quiet)
    assert "NOTE" not in footer(quiet)
    late = quiet.model_copy(update={"client": ClientHealth(ttft_late=3, ttft_late_max_ms=2.94)})
    assert "NOTE: 3 first token(s) came in one read with more of the stream: their TTFT may be" \
        " up to 2.9 ms too long" in footer(late)


def test_the_footer_says_when_the_client_sent_requests_late() -> None:
    """A run whose client held some request back more than 10 ms says so, even when its p99 is
    fine (`client_bottleneck` false) — also when the simulator serves from its own process."""
    from workloadlang.console.lines import footer

    plan = agent_plan(sessions=2)
    quiet = results_for(plan, [])
    some = quiet.model_copy(update={"client": ClientHealth(client_delay_over_10ms=2,
                                                           client_delay_max_ms=13.6,
                                                           client_bottleneck=False),
                                    "engine": EngineSummary(sim=True)})
    assert "NOTE: the client sent 2 request(s) more than 10 ms after they were due, up to" \
        " 13.6 ms" in footer(some)
    most = some.model_copy(update={"client": some.client.model_copy(
        update={"client_bottleneck": True})})
    assert "NOTE: the client was a bottleneck" in footer(most) and "sent 2" not in footer(most)


def test_the_summary_sets_the_engines_counters_beside_the_records() -> None:
    """The engine's own prefix-cache counters over the run (read before and after) next to what
    the records hold, and a note when the engine looked up prompt tokens the records do not
    have (aborted or errored requests, another client) or the other way round."""
    from workloadlang.console.format import counters_line
    from workloadlang.console.lines import summary_text

    M = MetricsSummary.model_validate

    snaps = [{"at": "start", "queries_tokens": 0, "hits_tokens": 0, "family": "llamacpp"},
             {"at": "end", "queries_tokens": 30738, "hits_tokens": 21948, "family": "llamacpp"}]
    same = {"snapshots": snaps, "records_prompt_tokens": 30738, "records_cached_tokens": 21948,
            "engine_queries_tokens": 30738, "engine_hits_tokens": 21948}
    assert counters_line(M(same)) == (
        "engine counters over the run [llamacpp]: 21,948 of 30,738 prompt tokens from cache; "
        "the records: 21,948 of 30,738")
    more = {**same, "engine_queries_tokens": 40738}
    assert "NOTE: the engine looked up 10,000 more prompt tokens than the records hold" \
        in counters_line(M(more))
    aborted = {**more, "records_uncounted": 2, "records_uncounted_planned_tokens": 10200}
    assert counters_line(M(aborted)).endswith(
        "the engine's 10,000 more are about what the 2 request(s) without a count in the records"
        " (aborted, errored) were planned to send (10,200)")
    assert "NOTE" not in counters_line(M(aborted))
    fewer = {**same, "engine_queries_tokens": 20000}
    assert "10,738 fewer" in counters_line(M(fewer))
    assert counters_line(M({**same, "engine_queries_tokens": 30800})).endswith("of 30,738")
    assert counters_line(M({"snapshots": snaps[:1], "records_prompt_tokens": 1,
                            "records_cached_tokens": 0})) is None  # no end read: nothing to say
    unread = {"snapshots": [], "records_prompt_tokens": 647, "records_cached_tokens": 607,
              "unavailable": "start: GET http://h/metrics: HTTP 501"}
    assert counters_line(M(unread), "llamacpp") == (
        "engine counters: not read (start: GET http://h/metrics: HTTP 501), so the records "
        "(607 of 647 prompt tokens from cache) are not cross-checked; llama-server serves "
        "them with --metrics")
    assert counters_line(M(unread), "vllm").endswith("are not cross-checked")
    down = {**unread, "unavailable": "end: GET http://h/metrics: ConnectError"}
    assert counters_line(M(down), "llamacpp").endswith("are not cross-checked")  # no false hint
    res = results_for(agent_plan(sessions=2), []).model_copy(update={"metrics": M(more)})
    assert "engine counters over the run [llamacpp]" in summary_text(res)
