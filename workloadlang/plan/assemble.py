"""The planner's front: a pure function `(IR, params, salt, env) -> Plan`.

Input: an `ir.Workload` that passed `check`, resolved param values (`evaluate.resolve_params`), a
salt, the environment (`max_context`: the engine's context limit, or None), `Limits`, the
traces its trace sessions replay (`tracefile.Trace`, loaded by the caller) and optionally the LRU
cache to model (`CacheModel`). Output: a `plan.model.Plan`, or `WorkloadError` with every
plan-time diagnostic (WL4xx).

Steps: walk the sessions (`planner.py`, `traceplan.py`) into messages and request drafts; replay
them against a perfect prefix cache (`prefix.py`) and, when asked, an LRU cache (`lru.py`); then
settings, the context-limit check, gates, totals and the hash.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from pydantic import TypeAdapter

from workloadlang import ir
from workloadlang.diagnostics import WorkloadError
from workloadlang.evaluate import COPY
from workloadlang.plan import arrivals, lanes, load, lru
from workloadlang.plan.dataplan import DataDraws
from workloadlang.plan.limits import Budget, Limits, TooBig
from workloadlang.plan.model import (
    CacheModel,
    DatasetInfo,
    GatePlan,
    Pick,
    Plan,
    PMessage,
    PRequest,
    SessionInfo,
    Totals,
    TraceInfo,
)
from workloadlang.plan.planner import (
    DEFAULT_HIT_RATIO,
    DEFAULT_TIMEOUT_S,
    Builder,
    Conv,
    Ctx,
    Draft,
    in_bounds,
    options_value,
    value,
    walk,
)
from workloadlang.plan.prefix import (
    HEADER_TOKENS,
    MessageNodes,
    Prefix,
    Stream,
    Trie,
    message_weight,
)
from workloadlang.selector import gate_metric_refs, select_static, test_refs


def build_plan(wl: ir.Workload, params: Mapping[str, Any], salt: str, source: str = "",
               env: Mapping[str, Any] | None = None, *, limits: Limits | None = None,
               traces: Mapping[str, Any] | None = None,
               cache: CacheModel | None = None, budget: Budget | None = None,
               datasets: Mapping[str, Any] | None = None) -> Plan:
    """Plan a checked workload. Raises `WorkloadError` with every plan-time diagnostic.
    `budget`: what the plan counts against (a sweep's points share one); default: its own,
    of `limits`. `datasets`: the datasets its messages take text from, read by the caller."""
    with collector_paused():
        return _build(wl, params, salt, source, env, budget or Budget(limits or Limits()),
                      traces, cache, datasets or {})


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while the planner builds: what it makes lives until
    the plan is made, and the full collections that would rescan those hundreds of thousands of
    objects are half of a 50,000-request plan's time (the planner leaves no cycles: the trie
    of its cache pass is dismantled)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _build(wl: ir.Workload, params: Mapping[str, Any], salt: str, source: str,
           env: Mapping[str, Any] | None, budget: Budget,
           traces: Mapping[str, Any] | None, cache: CacheModel | None,
           datasets: Mapping[str, Any]) -> Plan:
    """`build_plan`'s work (see it)."""
    env = dict(env or {})
    genv = {**env, **params}
    b = Builder(wl, salt, {}, budget)
    b.data = DataDraws(datasets, salt)
    root = Ctx(session="", session_name="", copy=0, phase="", label=None, index=0, path="",
               env=genv)
    b.options = options_value(b, wl.options, root)
    try:
        sessions, infos = plan_sessions(b, wl, root, traces or {})
    except TooBig as e:
        raise WorkloadError([*b.diags, budget.explain(e.diagnostic)]) from None
    windows = load.windows(b, wl, root)
    sessions = load.cut(b, sessions, windows["duration_s"])
    if not b.drafts and not b.diags:
        b.error("WL410", "the plan has no request: with these params no session sends anything",
                wl.sessions[0].span if wl.sessions else wl.span,
                "a `repeat`, `spawn` or session count, or a loop range, is 0 here")
    settings = {**plan_settings(b, wl, root, in_flight(b, sessions)), **windows,
                "slo": load.slo(b, wl, root)}
    if b.diags:
        raise WorkloadError(b.diags)
    requests = finish_requests(b, settings["concurrency"], cache, sessions)
    check_context(b, requests, settings["max_context"])
    gates = plan_gates(b, requests, wl, genv, [s.id for s in sessions])
    if b.diags:
        raise WorkloadError(b.diags)
    plan = Plan(
        workload=wl.name, doc=wl.doc, source=source, params=dict(params), salt=salt,
        phases=tuple(b.phases), sessions=tuple(sessions), messages=tuple(b.messages),
        requests=tuple(requests), calibrations=wl.calibrations, gates=tuple(gates),
        report=wl.report, totals=totals(requests, sessions, settings["concurrency"], cache),
        assumptions=assumptions(requests, settings["concurrency"], cache, b.picks, bool(infos),
                                b.messages),
        cache_model=cache, traces=tuple(infos), picks=tuple(b.picks), texts=tuple(b.text_table),
        datasets=b.data.infos(), **settings)
    return plan.model_copy(update={"plan_hash": plan_hash(plan)})


def plan_sessions(b: Builder, wl: ir.Workload, root: Ctx,
                  traces: Mapping[str, Any]) -> tuple[list[SessionInfo], list[TraceInfo]]:
    """Walk every session copy (a trace session: its trace's sessions) in order."""
    out, infos = [], []
    for s in wl.sessions:
        if getattr(s, "trace", None) is not None:
            from workloadlang.plan import traceplan

            info, made = traceplan.plan_trace(b, s, root, traces.get(s.name))
            out.extend(made)
            if info is not None:
                infos.append(info)
            continue
        n, starts = arrivals.copies(b, s, root)
        group_cap = arrivals.cap(b, s, root)
        before, first = b.budget.snapshot(0), len(b.drafts)
        for k in range(n):
            out.append(walk_session(b, s, root, k, None if not starts else starts[k],
                                    group_cap))
            if k == 0 and n > 1:
                b.budget.project(before, 0, out[-1].peak_tokens, n, f"session {s.name}",
                                 s.span)
        load.turns(b, s, root, first)
    return out, infos


def walk_session(b: Builder, s: ir.Session, root: Ctx, k: int, start: float | None = None,
                 group_cap: int | None = None) -> SessionInfo:
    """Copy k of session `s`; `start`: its planned start (an arrival: its first request is
    sent then, after a wait planned before it), `group_cap`: its session's `concurrency`."""
    sid = f"{s.name}#{k}"
    before = len(b.drafts)
    ctx = root.replace(session=sid, session_name=s.name, copy=k, path=sid,
                       env={**root.env, COPY: k})
    walk(b, s.body, ctx, Conv())
    drafts = b.drafts[before:]
    if start is not None and drafts:
        first = drafts[0].fields
        first["send_at"] = round(start + first["wait_before"], 9)
    peak = max((d.fields["prompt_tokens"] + d.fields["max_tokens"] for d in drafts), default=0)
    return SessionInfo(id=sid, name=s.name, copy_index=k, requests=len(drafts),
                       peak_tokens=peak, start_s=start, cap=group_cap)


def in_flight(b: Builder, sessions: Sequence[SessionInfo]) -> int:
    """How many requests can be in flight at once (the default concurrency): a session's
    `concurrency` cap counts."""
    return lanes.in_flight([SimpleNamespace(session=d.fields["session"], lane=d.fields["lane"])
                            for d in b.drafts], lanes.caps_of(sessions))


def plan_settings(b: Builder, wl: ir.Workload, root: Ctx, n_sessions: int) -> dict[str, Any]:
    """The workload's settings; `n_sessions`: how many requests its sessions can have in flight
    at once (the default concurrency)."""
    st = wl.settings

    def get(expr, default, conv=lambda v: v):
        return default if expr is None else conv(value(b, expr, root))

    limit = get(st.max_context, root.env.get("max_context"))
    for name in ("concurrency", "timeout", "hit_ratio", "max_context"):
        expr = getattr(st, name)
        if expr is not None and not in_bounds(b, name, value(b, expr, root), expr.span):
            limit = None if name == "max_context" else limit
    return {
        "concurrency": max(1, int(get(st.concurrency, max(1, n_sessions)) or 1)),
        "timeout_s": float(get(st.timeout, DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S),
        "fail_fast": bool(get(st.fail_fast, False)),
        "hit_ratio": float(get(st.hit_ratio, DEFAULT_HIT_RATIO)),
        "max_context": None if limit is None else int(limit),
    }


# ---------------------------------------------------------------- the cache passes


def levels(b: Builder) -> list[int]:
    """Each draft's barrier level: 0 before any phase; a request of phase p is after the
    barriers of every phase up to p (in the plan's phase order), and a session's requests
    never go back to a lower level (the runner's barriers, `run/executor.py`)."""
    index = {p: i + 1 for i, p in enumerate(b.phases)}
    at: dict[str, int] = {}
    out = []
    for d in b.drafts:
        f = d.fields
        level = max(at.get(f["session"], 0), index.get(f["phase"], 0))
        at[f["session"]] = level
        out.append(level)
    return out


def streams_of(b: Builder, trie: Trie, starts: Mapping[str, float] | None = None
               ) -> list[Stream]:
    """The cache model's view of every draft: its prompt's and its kept reply's trie nodes,
    and when it can be sent (`starts`: each session copy's planned start, 0 when absent)."""
    nodes = MessageNodes(trie, b.messages)
    by_id, out, starts = b.by_id, [], starts or {}
    for d, level in zip(b.drafts, levels(b)):
        f = d.fields
        last, kept = f["last_message"], f["reply_kept"]
        reply = None
        if kept != "drop" and d.generated:
            reply = nodes.reply(last, f["id"], d.generated, kept == "partial")
        out.append(Stream(prompt=nodes.prompt(last), reply=reply, group=d.group, level=level,
                          candidates=tuple(by_id[c] for c in d.candidates),
                          resend_of=None if d.resend_of is None else by_id[d.resend_of],
                          lane=d.lane, send_at=f["send_at"],
                          start=f["send_at"] if f["send_at"] is not None
                          else starts.get(f["session"], 0.0)))
    return out


# one set of field names shared by every request (a set: `model_copy` copies and extends it;
# nothing changes it in place, the model being frozen)
REQUEST_FIELDS = set(PRequest.model_fields)


def finish_requests(b: Builder, concurrency: int, cache: CacheModel | None,
                    sessions: Sequence[SessionInfo] = ()) -> list[PRequest]:
    """The drafts as `PRequest`s, with what a perfect cache (and the LRU cache) serves;
    `sessions`: the session copies, whose planned starts bound what a request can share."""
    trie = Trie()
    streams = streams_of(b, trie, {s.id: s.start_s for s in sessions if s.start_s is not None})
    expect = Prefix(trie, streams).run()
    lru_tokens: Sequence[int | None] = [None] * len(streams)
    if cache is not None:
        caps = [min(e.tokens, max(0, d.fields["prompt_tokens"] - 1))
                for e, d in zip(expect, b.drafts)]
        lru_tokens = lru.replay(trie, streams, [d.generated for d in b.drafts],
                                [d.fields["prompt_tokens"] for d in b.drafts], caps, cache)
    trie.dismantle()  # its cycles freed now, not by a collection of every live object
    ids = [d.fields["id"] for d in b.drafts]
    out = []
    for i, (e, lru_n) in enumerate(zip(expect, lru_tokens)):
        f, warm = b.drafts[i].fields, b.drafts[i].warm
        b.drafts[i] = None  # type: ignore[call-overload]  # its fields go into the request
        cap = max(0, f["prompt_tokens"] - 1)
        most = None if e.most is None or warm else min(e.most, cap)
        expected = cap if warm else min(e.tokens, cap)
        # built unvalidated (the walk made every value with its type) with one shared set of
        # fields: a validated model and its own fields set cost 2 KB more per request
        out.append(PRequest.model_construct(
            _fields_set=REQUEST_FIELDS, **f, expected_cached=expected,
            prefix_source=None if e.source is None else ids[e.source],
            # a message header or less (every session's first user message) is not worth one
            expected_cached_max=most if most is not None and most > expected + HEADER_TOKENS
            else None, lru_cached=lru_n))
    b.drafts = []  # what is left of them is in the requests
    return out


# ---------------------------------------------------------------- checks, gates, totals


def check_context(b: Builder, requests: list[PRequest], limit: int | None) -> None:
    """WL406: a planned request whose prompt plus generation exceeds the context limit."""
    if limit is None:
        return
    seen: set[tuple[int, int]] = set()
    for r in requests:
        need = r.prompt_tokens + r.max_tokens
        if need > limit and (r.span.line, r.span.col) not in seen:
            seen.add((r.span.line, r.span.col))
            b.error("WL406", f"request {r.id} needs {need:,} tokens (prompt {r.prompt_tokens:,} + "
                    f"max_tokens {r.max_tokens:,}), more than the context limit {limit:,}",
                    r.span, hint=too_big_hint(b.budget_params.get(r.id, ())))


def too_big_hint(budget_params: tuple[str, ...]) -> str:
    """Output: WL406's hint, naming the flags of the params the request's `max_tokens` was
    written with (`max_tokens` -> `--max-tokens`)."""
    flags = " or ".join(f"--{n.replace('_', '-')}" for n in budget_params)
    lower = f"lower the generation budget ({flags}) or the prompt" if flags else "lower the sizes"
    return f"{lower}, or raise --max-context if the engine allows"


def plan_gates(b: Builder, requests: list[PRequest], wl: ir.Workload, env: Mapping[str, Any],
               sessions: list[str]) -> list[GatePlan]:
    out = []
    by_session: dict[str, list] = {}
    for r in requests:
        by_session.setdefault(r.session, []).append(r)
    for g in wl.gates:
        scopes = sessions if g.scope == "each_session" else ["overall"]
        refs = gate_metric_refs(g)
        # the condition's metrics (`when`) are read like the gate's own
        cond = {id(r) for r in refs} - {id(r) for r in test_refs(g)}
        picked = {scope: [select_static(requests if scope == "overall" else
                                        by_session.get(scope, []), ref.selector, env)
                          for ref in refs] for scope in scopes}
        # an `each session` gate judges the sessions its selectors can read (`check` warns,
        # WL218, of the others); each of its selectors must read something in each of them
        judged = [sc for sc in scopes if sc == "overall" or any(picked[sc])] or scopes[:1]
        for k, ref in enumerate(refs):
            missing = [sc for sc in judged if not picked[sc][k]]
            if missing:
                where = "" if g.scope == "overall" else f" in {missing[0]}" if any(
                    picked[missing[0]]) else " in any session"
                what = f"gate `{g.name}`" + ("'s condition" if id(ref) in cond else "")
                b.error("WL405", f"{what}: `{ref.metric}{{...}}` matches no planned "
                        f"request{where}", ref.span)
        reads = {sc: len({r.id for rs in picked[sc] for r in rs}) for sc in judged}
        out.append(GatePlan(gate=g, reads=reads))
    return out


def totals(reqs: list[PRequest], sessions: list[SessionInfo], concurrency: int,
           cache: CacheModel | None) -> Totals:
    prompt = sum(r.prompt_tokens for r in reqs)
    cached = sum(r.expected_cached for r in reqs)
    most = [r.expected_cached_max for r in reqs if r.expected_cached_max is not None]
    peak, _ = lanes.peak_demand(demands(reqs, sessions), concurrency)
    gen = sum(r.abort_after if r.abort_after is not None else r.max_tokens for r in reqs)
    return Totals(requests=len(reqs), prompt_tokens=prompt, cold_tokens=prompt - cached,
                  expected_cached_tokens=cached,
                  expected_cached_max_tokens=(cached + sum(most) - sum(
                      r.expected_cached for r in reqs if r.expected_cached_max is not None))
                  if most else None,
                  lru_cached_tokens=None if cache is None else sum(r.lru_cached or 0
                                                                   for r in reqs),
                  max_tokens=sum(r.max_tokens for r in reqs),
                  peak_inflight_tokens=peak,
                  working_set_tokens=prompt - cached + gen)


def demands(reqs: list[PRequest], sessions: list[SessionInfo]) -> list[list[int]]:
    """The demand profile (`lanes.demand`) of each session copy that can run at once (of a
    capped session, the cap largest): its peak request, or with parallel forks the most its
    requests in flight together hold."""
    forked = {r.session for r in reqs if r.lane}
    mine = lanes.by_session([r for r in reqs if r.session in forked])
    profiles = {s.id: lanes.demand(mine[s.id], lambda r: r.prompt_tokens + r.max_tokens)
                if s.id in forked else [s.peak_tokens] for s in sessions}
    return lanes.within_caps(profiles, lanes.caps_of(sessions), lambda p: p[-1] if p else 0)


def assumptions(reqs: list[PRequest], concurrency: int, cache: CacheModel | None,
                picks: Sequence[Pick] = (), traced: bool = False,
                messages: Sequence[PMessage] = ()) -> tuple[str, ...]:
    """What the expectations assume where the order of requests is not fixed by the plan."""
    out = []
    shared = [(r, r.expected_cached_max) for r in reqs if r.expected_cached_max is not None]
    if shared:
        more = sum(most - r.expected_cached for r, most in shared)
        lanes = any(r.lane for r in reqs)
        out.append(
            f"{len(shared):,} request(s) share up to {more:,} more tokens with requests of "
            f"concurrent sessions{' or parallel branches' if lanes else ''} (first: "
            f"{shared[0][0].id}); which finishes first is not planned, so `exp. cached` counts only "
            "requests certainly finished before each one (its own "
            + ("session or branch, or before a phase barrier or its fork)" if lanes else
               "session, or before a phase barrier)")
            + " and `exp. max` what it would be if the others finished first")
    out.extend(parallel_assumptions(reqs, picks, messages))
    if traced:
        tail = "exact at concurrency 1" if concurrency == 1 else (
            f"at concurrency {concurrency} up to {concurrency - 1} requests sent before one may "
            "still be in flight when it is sent, so an engine can serve it less")
        out.append("trace requests are assumed to finish in the order they are sent: each "
                   f"expects what every trace request sent before it left in the cache ({tail})")
    if cache is not None:
        out.append(f"LRU: a cache of {cache.tokens:,} tokens in blocks of {cache.block:,} that "
                   "also keeps generated tokens, evicting least recently used blocks, a "
                   "prompt's last blocks first; requests taken one at a time: phase by phase, "
                   "the sessions of a phase in turn, trace requests in send order; a request "
                   "is served at most its `exp. cached`")
    return tuple(out)


def parallel_assumptions(reqs: list[PRequest], picks: Sequence[Pick],
                         messages: Sequence[PMessage] = ()) -> list[str]:
    """What a plan with parallel forks assumes: branches in flight together, the requests
    after a fork waiting for all of them, and a branch kept at run time counted as branch 0."""
    out = []
    lanes = {r.lane for r in reqs if r.lane}
    if lanes:
        forks = {part.split(".")[0] for lane in lanes for part in lane.split("/")}
        out.append(f"{len(forks):,} parallel fork(s) send their branches' requests side by side "
                   "(a branch's in order); a branch expects from cache what was finished before "
                   "its fork and its own earlier requests, and what follows a fork waits for "
                   "every branch to end")
    out.extend(keep_assumptions(messages, picks))
    return out


def branch_tokens(messages: Sequence[PMessage], pick: Pick) -> list[int]:
    """The tokens each branch of a kept fork added to the conversation before it: each branch
    walked back to where they meet, the latest message first (a branch's messages were all made
    after the fork's, so the walk never passes the fork)."""
    cur = [b.last_message for b in pick.branches]
    added = [0] * len(cur)
    while len(set(cur)) > 1:
        k = max(range(len(cur)), key=lambda j: _index(cur[j]))
        m = messages[_index(cur[k])]
        added[k] += message_weight(m)
        cur[k] = m.after
    return added


def _index(message: int | None) -> int:
    """A branch's last message, -1 for none (a branch that added nothing)."""
    return -1 if message is None else message


def keep_assumptions(messages: Sequence[PMessage], picks: Sequence[Pick]) -> list[str]:
    """One line per `keep first|longest` statement (however many times its sessions ran it):
    the branch is chosen at run time, the plan counts branch 0, and what the runner expects
    when the branches differ in size."""
    groups: dict[tuple[int, str], list[Pick]] = {}
    for p in picks:
        groups.setdefault((p.span.line, p.rule), []).append(p)
    out = []
    for (line, rule), ps in groups.items():
        sessions = list(dict.fromkeys(p.session for p in ps))
        who = sessions[0] if len(sessions) == 1 else \
            f"{len(sessions):,} sessions: {sessions[0]}, ..."
        times = "" if len(ps) == len(sessions) else f"; {len(ps):,} forks in all"
        differ = any(len(set(branch_tokens(messages, p))) > 1 for p in ps)
        how = "finishes first" if rule == "first" else "ends the longest"
        out.append(
            f"after the fork of line {line} ({who}{times}) the session goes on from the branch that "
            f"{how} (`keep {rule}`), chosen at run time; the plan counts branch 0's conversation"
            + ("; the branches differ in size, so the requests after the fork may send more or "
               "fewer tokens than planned, and the runner expects from cache what the kept "
               "branch's requests counted on the engine" if differ else
               ", the same size as any other branch's"))
    return out


def plan_hash(plan: Plan) -> str:
    """sha256 of the canonical JSON of the plan, without its hash, its context limit, the path
    it was read from (`x.wl` and `./x.wl` are the same plan) and the LRU figures (an analysis
    of the plan for a cache size, not part of what is sent): equal plans, equal hashes. A
    trace counts by its content (its sha256), not by its path. Which requests are `isolated`
    is hashed as a list of their ids, added only when there are any."""
    # the context limit only checks the plan (what it changes through `$max_context` is in the
    # params and the requests): `wl plan` without it and `wl run`, which learns it, agree
    plan = plan.model_copy(update={"max_context": None})
    read: list[TraceInfo | DatasetInfo] = [*plan.traces, *plan.datasets]
    paths = {t.path: f"sha256:{t.sha256}" for t in read}
    if paths:  # a trace (a dataset) is its content wherever it was read from, a param too
        plan = plan.model_copy(update={"params": {k: paths.get(v, v) if isinstance(v, str) else v
                                                  for k, v in plan.params.items()}})
    digest = hashlib.sha256(PLAN_JSON.dump_json(plan, exclude={
        "plan_hash": True, "source": True, "cache_model": True,
        "totals": {"lru_cached_tokens"}, "requests": {"__all__": {"isolated", "lru_cached"}},
        "traces": {"__all__": {"path"}},  # its content is in, by its sha256
        "datasets": {"__all__": {"path"}},
        "assumptions": True}))  # the assumptions say in words what the requests hold
    isolated = [r.id for r in plan.requests if r.isolated]
    if isolated:
        digest.update(("\nisolated " + " ".join(isolated)).encode())
    return digest.hexdigest()[:16]


PLAN_JSON = TypeAdapter(Plan)  # dumps the plan as bytes at once


__all__ = ["build_plan", "plan_hash", "Draft"]
