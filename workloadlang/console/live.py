"""The live terminal view: a header and one panel per session, redrawn in place by rich.

Input: the `Plan` (planned requests per session and label, each session's context peak, the hit
ratio), then records and events as they happen (the same interface as `lines.PlainView`).
Output: a frame redrawn about 8 times a second on `out` through `rich.live.Live` (no hand-written
escape codes), the last frame left on screen, then the plain summary tables (`lines.summary_text`).

The state (`RunState` of `SessionState`s) is plain data, updated in O(1) per record under a lock
(`apply_record`, `apply_event`); drawing (`render_state`, a pure function of the state and a width)
runs on rich's refresh thread at a bounded rate, so a fast run is never slowed down by the view.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from rich.columns import Columns
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from workloadlang.console.lines import event_line, record_line, summary_text
from workloadlang.plan.model import Plan
from workloadlang.results import Record

PANEL_WIDTH = 38  # one session panel, borders included: two fit in 80 columns
MAX_PANELS = 12  # beyond this, the interesting sessions get a panel and the rest one line
PARTIAL = "▏▎▍▌▋▊▉"  # eighths of a block, for the bar's last cell


# ---------------------------------------------------------------- state


@dataclass
class SessionState:
    """What one session has shown so far, next to what the plan says it will do.

    `label_total`/`label_done`: planned and finished requests per label (plan order);
    `main_label`: the label with the most planned requests (the session's main conversation);
    `context_tokens`: the prompt of the latest request; `peak_tokens`: the planned peak
    (prompt + max_tokens, max over the session). Warm figures count requests that expect at
    least half their prompt from cache and have a reuse figure."""

    id: str
    planned: int
    peak_tokens: int
    main_label: str
    label_total: dict[str, int]
    label_done: dict[str, int] = field(default_factory=dict)
    done: int = 0
    skipped: int = 0
    errors: int = 0
    aborted: int = 0
    context_tokens: int | None = None
    phase: str = ""
    label: str = ""
    index: int | None = None
    warm: int = 0
    warm_reuse_sum: float = 0.0
    hits: int = 0
    misses: int = 0
    pp_tps: float | None = None
    tg_tps: float | None = None
    last_error: str | None = None
    verdict: str | None = None

    @property
    def finished(self) -> bool:
        """Output: True once every planned request has a record (run or skipped)."""
        return self.done >= self.planned

    @property
    def reuse(self) -> float | None:
        """Output: mean reuse of the warm requests so far, None before the first."""
        return self.warm_reuse_sum / self.warm if self.warm else None


@dataclass
class RunState:
    """The whole run as the view knows it. `stage`: starting, calibrating, preparing text
    (done/total, before the clock), running, judging, done. `started_at`/`ended_at`/`now`: clock
    readings (elapsed = end-or-now - start). `engine_*`: the engine's prefix-cache counters
    since the first `/metrics` snapshot."""

    workload: str
    hit_ratio: float
    phases: tuple[str, ...]
    total: int
    sessions: dict[str, SessionState]
    stage: str = "starting"
    phase: str = ""
    done: int = 0
    errors: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    now: float | None = None
    engine_base: tuple[int, int] | None = None
    engine_hits: int | None = None
    engine_queries: int | None = None
    exit_code: int | None = None

    @property
    def elapsed_s(self) -> float:
        """Output: seconds since start (0 before it), frozen once the run has ended."""
        if self.started_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else self.now
        return max(0.0, (end if end is not None else self.started_at) - self.started_at)




def state_from_plan(plan: Plan) -> RunState:
    """Input: a plan. Output: the empty `RunState` with every session's planned totals."""
    per: dict[str, list] = {s.id: [] for s in plan.sessions}
    for r in plan.requests:
        per.setdefault(r.session, []).append(r)
    sessions = {}
    for sid, reqs in per.items():
        totals: dict[str, int] = {}
        for r in reqs:
            totals[r.label] = totals.get(r.label, 0) + 1
        main = max(totals, key=lambda k: totals[k]) if totals else ""
        sessions[sid] = SessionState(
            id=sid, planned=len(reqs), main_label=main, label_total=totals,
            label_done={k: 0 for k in totals},
            peak_tokens=max((r.prompt_tokens + r.max_tokens for r in reqs), default=0))
    return RunState(workload=plan.workload, hit_ratio=plan.hit_ratio, phases=plan.phases,
                    total=len(plan.requests), sessions=sessions)


def apply_record(state: RunState, rec: Record) -> None:
    """Input: the state and one completed (or skipped) record. Output: none; the state is
    updated in O(1): progress, position, context, reuse, speeds, errors."""
    s = state.sessions.get(rec.session)
    if s is None:  # a record the plan did not announce: count it, give it a panel
        s = state.sessions[rec.session] = SessionState(
            id=rec.session, planned=0, peak_tokens=0, main_label=rec.label, label_total={})
    state.done += 1
    s.done += 1
    s.label_done[rec.label] = s.label_done.get(rec.label, 0) + 1
    if state.stage in ("starting", "calibrating") or state.stage.startswith("preparing"):
        state.stage = "running"
    if rec.skipped:
        s.skipped += 1
        return
    state.phase, s.phase, s.label, s.index = rec.phase, rec.phase, rec.label, rec.index
    s.context_tokens = rec.prompt_tokens if rec.prompt_tokens is not None else rec.planned_prompt_tokens
    if rec.error is not None:
        s.errors += 1
        state.errors += 1
        s.last_error = rec.error.kind
    s.aborted += rec.aborted
    s.pp_tps = rec.pp_tps if rec.pp_tps is not None else s.pp_tps
    s.tg_tps = rec.tg_tps if rec.tg_tps is not None else s.tg_tps
    if rec.warm and rec.reuse is not None:
        s.warm += 1
        s.warm_reuse_sum += rec.reuse
    s.hits += rec.hit is True
    s.misses += rec.hit is False


def apply_event(state: RunState, kind: str, data: dict[str, Any], now: float | None = None) -> None:
    """Input: the state, a runner event (`plan`, `calibration`, `metrics`, `gate`, `summary`)
    and the clock reading. Output: none; the stage, engine counters and verdicts are updated."""
    if kind == "plan" and state.stage == "starting":
        state.stage = "calibrating"
    elif kind == "calibration" and state.stage in ("starting", "calibrating"):
        state.stage = "running"
    elif kind == "note" and data.get("preparing") and state.done == 0:
        done, total = data["preparing"]  # an event's payload: `Sink.event`'s dict
        state.stage = "running" if done >= total else f"preparing text {done:,}/{total:,}"
    elif kind == "metrics":
        hits, queries = data.get("hits_tokens") or 0, data.get("queries_tokens") or 0
        if state.engine_base is None:  # counters over the run: since the first snapshot
            state.engine_base = (hits, queries)
        state.engine_hits = hits - state.engine_base[0]
        state.engine_queries = queries - state.engine_base[1]
    elif kind == "gate":
        state.stage = "judging"
    elif kind == "summary":
        state.stage, state.ended_at = "done", now
        state.exit_code = data.get("exit_code")
        for sid, verdict in (data.get("verdicts") or {}).items():
            if sid in state.sessions:
                state.sessions[sid].verdict = verdict


# ---------------------------------------------------------------- rendering (pure)


def ktok(v: int | None) -> str:
    """Input: a token count. Output: `–`, `812`, `135k` or `1.2M`."""
    if v is None:
        return "–"
    if v >= 1_000_000:
        return f"{v / 1_000_000:.1f}M"
    return f"{v / 1000:.0f}k" if v >= 10_000 else f"{v / 1000:.1f}k" if v >= 1000 else str(v)


def tps(v: float | None) -> str:
    """Input: tokens/s. Output: `–`, `46` or `12.4k`."""
    return "–" if v is None else f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def clock_text(seconds: float) -> str:
    """Input: seconds. Output: `MM:SS`, or `H:MM:SS` from an hour up."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def bar(frac: float, width: int, style: str = "green") -> Text:
    """Input: a fraction (clamped to [0, 1]) and a width in cells. Output: a bar of full blocks,
    one eighth-block for the remainder, and dim `░` for the rest, exactly `width` cells."""
    frac = min(1.0, max(0.0, frac))
    cells = frac * width
    full = int(cells)
    eighth = int((cells - full) * 8)
    text = Text()
    text.append("█" * full, style=style)
    if full < width and eighth:
        text.append(PARTIAL[eighth - 1], style=style)
        full += 1
    text.append("░" * (width - full), style="dim")
    return text


def verdict_mark(s: SessionState, stage: str) -> Text:
    """Input: a session and the run's stage. Output: the panel's status marker: waiting,
    running, judging, `✓ ok` (green) or `✗ <verdict>` (red)."""
    if s.verdict is not None:
        ok = s.verdict == "ok"
        return Text(f"{'✓' if ok else '✗'} {s.verdict}", style="bold green" if ok else "bold red")
    if s.finished:
        return Text("done · " + ("judging" if stage != "done" else "no per-session gate"),
                    style="cyan")
    return Text("running" if s.done else "waiting", style="yellow" if s.done else "dim")


def border_style(s: SessionState) -> str:
    if s.verdict is not None:
        return "green" if s.verdict == "ok" else "red"
    if s.errors:
        return "red"
    return "cyan" if s.finished else "yellow" if s.done else "dim"


def context_line(s: SessionState, inner: int) -> Text:
    """`ctx ████░░ 82k/152k`: the latest prompt against the session's planned peak."""
    suffix = f" {ktok(s.context_tokens or 0)}/{ktok(s.peak_tokens)}"
    width = max(4, inner - len("ctx ") - len(suffix))
    frac = (s.context_tokens or 0) / s.peak_tokens if s.peak_tokens else 0.0
    return Text("ctx ").append_text(bar(frac, width)).append(suffix)


def position_line(s: SessionState) -> Text:
    """`phase/label[index]  step k/n`: where the session is."""
    where = "–" if not s.label else f"{s.phase + '/' if s.phase else ''}{s.label}[{s.index}]"
    return Text(f"{where}  step {s.done}/{s.planned}")


def labels_line(s: SessionState) -> Text:
    """`main 12/30 · sub 1/2 · finalize 0/1`: done/total per label, the main label first."""
    order = [s.main_label] + [k for k in s.label_total if k != s.main_label]
    parts = []
    for k in order:
        done, total = s.label_done.get(k, 0), s.label_total.get(k, 0)
        style = "green" if total and done >= total else "" if done else "dim"
        parts.append(Text(f"{k} {done}/{total}", style=style))
    return Text(" · ").join(parts)


def reuse_line(s: SessionState, hit_ratio: float) -> Text:
    """`reuse 99.2% · 30 hit · 1 miss`: mean reuse of the warm requests, green at or above the
    plan's hit ratio and red below it; hits and misses as the records judged them."""
    if s.reuse is None:
        return Text("reuse – (no warm request yet)", style="dim")
    style = "green" if s.reuse >= hit_ratio else "red"
    text = Text("reuse ").append(f"{100 * s.reuse:.1f}%", style=f"bold {style}")
    text.append(f" · {s.hits} hit · ")
    text.append(f"{s.misses} miss", style="red" if s.misses else "")
    return text


def speed_line(s: SessionState) -> Text:
    """`pp 12.4k · tg 46 tok/s`: the latest prefill and generation speeds."""
    return Text(f"pp {tps(s.pp_tps)} · tg {tps(s.tg_tps)} tok/s")


def trouble_line(s: SessionState) -> Text:
    """`err 1 (http) · aborted 0 · skipped 3`: errors (with the latest kind), aborts, skips."""
    text = Text(f"err {s.errors}" + (f" ({s.last_error})" if s.last_error else ""),
                style="bold red" if s.errors else "")
    text.append(f" · aborted {s.aborted}")
    if s.skipped:
        text.append(f" · skipped {s.skipped}", style="dim")
    return text


def session_panel(s: SessionState, hit_ratio: float, stage: str, width: int = PANEL_WIDTH) -> Panel:
    """Input: one session, the plan's hit ratio, the run's stage, the panel width.
    Output: the session's panel (title: id; subtitle: status/verdict)."""
    inner = width - 4
    lines = [context_line(s, inner), position_line(s), labels_line(s), reuse_line(s, hit_ratio),
             speed_line(s), trouble_line(s)]
    for line in lines:
        if line is not lines[2]:  # many labels wrap rather than vanish
            line.no_wrap, line.overflow = True, "ellipsis"
    return Panel(Group(*lines), title=Text(s.id, style="bold"), title_align="left",
                 subtitle=verdict_mark(s, stage), subtitle_align="right",
                 border_style=border_style(s), width=width, padding=(0, 1))


def header(state: RunState) -> Text:
    """`workload · N sessions · MM:SS · done/total requests · phase p (k/n) · stage`."""
    n = len(state.sessions)
    text = Text(state.workload, style="bold")
    text.append(f" · {n} session{'s' if n != 1 else ''} · {clock_text(state.elapsed_s)}"
                f" · {state.done}/{state.total} requests")
    if state.phases and state.phase:
        k = state.phases.index(state.phase) + 1 if state.phase in state.phases else "?"
        text.append(f" · phase {state.phase} ({k}/{len(state.phases)})")
    if state.errors:
        text.append(f" · {state.errors} error{'s' if state.errors != 1 else ''}", style="bold red")
    if state.engine_queries:
        text.append(f" · engine {100 * (state.engine_hits or 0) / state.engine_queries:.1f}% "
                    "of queried tokens hit")
    text.append(f" · {state.stage}", style="cyan" if state.stage != "done" else "bold")
    return text


def pick_sessions(state: RunState, limit: int = MAX_PANELS) -> tuple[list[SessionState], list[SessionState]]:
    """Input: the state and a panel limit. Output: (shown, hidden) sessions, both in plan order.
    Over the limit, failed or erroring sessions come first, then running ones, then the rest."""
    all_ = list(state.sessions.values())
    if len(all_) <= limit:
        return all_, []

    def rank(s: SessionState) -> int:
        if s.errors or (s.verdict not in (None, "ok")):
            return 0
        return 1 if s.done and not s.finished else 2 if not s.done else 3

    chosen = {s.id for s in sorted(all_, key=rank)[:limit]}  # sorted() is stable: plan order
    return [s for s in all_ if s.id in chosen], [s for s in all_ if s.id not in chosen]


def hidden_line(hidden: list[SessionState]) -> Text:
    """`+ 12 more sessions: 5 done, 4 running, 3 waiting`."""
    done = sum(s.finished for s in hidden)
    running = sum(1 for s in hidden if s.done and not s.finished)
    return Text(f"+ {len(hidden)} more sessions: {done} done, {running} running, "
                f"{len(hidden) - done - running} waiting", style="dim")


def columns_fit(n: int, width: int) -> bool:
    """Output: True when at least two panels fit side by side in `width` cells."""
    return n > 1 and width >= 2 * PANEL_WIDTH + 1


def render_state(state: RunState, width: int) -> RenderableType:
    """Input: the state and the terminal width. Output: the frame: the header, then one panel
    per session, side by side (wrapping) when two fit in the width, stacked otherwise."""
    shown, hidden = pick_sessions(state)
    pw = min(PANEL_WIDTH, max(20, width))
    panels = [session_panel(s, state.hit_ratio, state.stage, pw) for s in shown]
    body: RenderableType = Columns(panels, padding=(0, 1)) if columns_fit(len(panels), width) \
        else Group(*panels)
    parts: list[RenderableType] = [header(state), body]
    if hidden:
        parts.append(hidden_line(hidden))
    return Group(*parts)


# ---------------------------------------------------------------- the view


class LiveView:
    """The `Sink` + view used on a terminal (or with `--viz`): `start()`, `record()`,
    `event()`, `stop()`, `summary()` like `PlainView`. Errored records and the calibration and
    engine-counter events are also printed above the live area, so they stay on screen."""

    def __init__(self, plan: Plan, out: IO[str], *, clock: Callable[[], float] = time.monotonic,
                 width: int | None = None, refresh_per_second: float = 8.0):
        self.plan, self.out, self.clock = plan, out, clock
        self.state = state_from_plan(plan)
        self.lock = threading.Lock()
        self.console = Console(file=out, force_terminal=True, width=width, highlight=False,
                               soft_wrap=False)
        own = out is sys.stdout or out is sys.__stdout__
        self.live = Live(console=self.console, get_renderable=self.frame,
                         refresh_per_second=refresh_per_second, transient=False,
                         redirect_stdout=own, redirect_stderr=own)
        self.started = False

    def frame(self) -> RenderableType:
        """Called by rich's refresh thread: the current frame at the console's width."""
        with self.lock:
            self.state.now = self.clock()
            return render_state(self.state, self.console.width)

    def start(self) -> None:
        with self.lock:
            self.state.started_at = self.clock()
        self.live.start()
        self.started = True

    def stop(self) -> None:
        """Paint the last frame (left on screen) and stop the refresh thread; idempotent."""
        if self.started:
            self.started = False
            self.live.stop()

    def record(self, rec: Record) -> None:
        with self.lock:
            apply_record(self.state, rec)
        if rec.error is not None:
            self.console.print(Text(record_line(rec), style="red"))

    def event(self, kind: str, data: dict[str, Any]) -> None:
        with self.lock:
            apply_event(self.state, kind, data, self.clock())
        line = event_line(kind, data)
        if line:
            self.console.print(Text(line, style="dim"))

    def summary(self, results: Any) -> None:
        self.out.write(summary_text(results))
        self.out.flush()
