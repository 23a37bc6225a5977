"""A plan partitioned by session: one shard per worker.

Input: a `Plan` and the number of workers asked for. Output: a `Partition`: the shards (whole
sessions each, with their share of the concurrency limit and their planned load) and notes on
what runs differently from one process.

A session never splits: its sub-agents and forks are requests of the session. Sessions that
reference each other stay together too: a request that depends on another session's request
(`deps`), a prompt that carries another session's reply, a loop (`until`) whose requests span
sessions. A fail-fast workload stops every session at the first miss, so all its sessions stay
on one worker. Shared prefixes across sessions keep the order the plan assumes without keeping
their sessions together: the plan counts a prefix of another session as certain only when a
phase barrier lies between (barriers hold across workers, `coordinate`) or, for trace requests,
by planned send time (send times are kept from one start instant on the driver's clock,
`clocks`).

Groups of sessions are dealt out heaviest first to the shard with the least load so far, the
load being what a worker builds and sends: prompt tokens plus a fixed cost per request
(`REQUEST_COST_TOKENS`).

The concurrency limit is split, not shared: shard i gets `c_i` slots, the `c_i` add up to the
plan's limit and follow each shard's share of the demand (its sessions, a session with parallel
forks counted once per branch it can have in flight; at least 1 each, the remainder to the
largest fractions). So the whole run never has more requests in flight than the limit; a
slot free on one worker is not used by another worker's sessions. A limit below the number of
workers runs on that many workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from workloadlang.plan.model import Plan, Seg

REQUEST_COST_TOKENS = 1000
"""The client's fixed work per request (a connection turn, headers, the answer's stream, the
record), counted as this many prompt tokens of body when shards are balanced."""


@dataclass(frozen=True)
class Shard:
    """One worker's part of a plan: whole sessions (plan order), its concurrency slots and its
    planned load."""

    index: int
    sessions: tuple[str, ...]
    concurrency: int
    requests: int
    prompt_tokens: int


@dataclass(frozen=True)
class Partition:
    shards: tuple[Shard, ...]
    notes: tuple[str, ...] = ()

    def shard_of(self) -> dict[str, int]:
        """Output: session id -> the index of the shard that holds it."""
        return {s: sh.index for sh in self.shards for s in sh.sessions}


def partition(plan: Plan, workers: int) -> Partition:
    """Input: a plan and the workers asked for (>= 1). Output: at most `workers` shards (fewer
    when the plan has fewer groups of sessions or a lower concurrency limit, said in `notes`)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    groups = session_groups(plan)
    notes: list[str] = []
    n = min(workers, len(groups), max(1, plan.concurrency))
    if n < workers:
        notes.append(fewer_workers_note(plan, workers, n, len(groups)))
    loads = group_loads(plan, groups)
    order = sorted(range(len(groups)), key=lambda g: (-loads[g], g))
    bins: list[list[int]] = [[] for _ in range(n)]
    totals = [0] * n
    for g in order:
        i = min(range(n), key=lambda b: (totals[b], b))
        bins[i].append(g)
        totals[i] += loads[g]
    return Partition(make_shards(plan, groups, bins), tuple(notes))


def fewer_workers_note(plan: Plan, asked: int, used: int, groups: int) -> str:
    why = []
    if groups < asked:
        why.append(f"{groups} group(s) of sessions that cannot split"
                   + (" (fail-fast: a miss stops every session)" if plan.fail_fast else ""))
    if plan.concurrency < asked:
        why.append(f"concurrency {plan.concurrency} (at least one slot per worker)")
    return f"{used} worker(s) of the {asked} asked for: " + " and ".join(why)


def make_shards(plan: Plan, groups: list[list[str]], bins: list[list[int]]) -> tuple[Shard, ...]:
    """Output: the shards, their sessions in plan order, with their concurrency slots."""
    position = {s.id: i for i, s in enumerate(plan.sessions)}
    members = [sorted((s for g in b for s in groups[g]), key=position.__getitem__) for b in bins]
    width = session_widths(plan)
    slots = split_concurrency(plan.concurrency, [sum(width.get(s, 1) for s in m) for m in members])
    reqs: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for r in plan.requests:
        reqs[r.session] = reqs.get(r.session, 0) + 1
        tokens[r.session] = tokens.get(r.session, 0) + r.prompt_tokens
    return tuple(Shard(index=i, sessions=tuple(m), concurrency=slots[i],
                       requests=sum(reqs.get(s, 0) for s in m),
                       prompt_tokens=sum(tokens.get(s, 0) for s in m))
                 for i, m in enumerate(members))


def session_widths(plan: Plan) -> dict[str, int]:
    """Output: per session with parallel forks, how many of its requests can be in flight at
    once: the most leaf branches (`PRequest.lane`) one of its outermost forks has."""
    lanes: dict[str, set[str]] = {}
    for r in plan.requests:
        if r.lane:
            lanes.setdefault(r.session, set()).add(r.lane)
    out = {}
    for session, mine in lanes.items():
        leaves = [x for x in mine if not any(y.startswith(x + "/") for y in mine)]
        per_fork: dict[str, int] = {}
        for leaf in leaves:
            fork = leaf.split("/", 1)[0].split(".", 1)[0]
            per_fork[fork] = per_fork.get(fork, 0) + 1
        out[session] = max(per_fork.values())
    return out


def split_concurrency(limit: int, sessions: list[int]) -> list[int]:
    """Input: the run's concurrency limit and each shard's demand (its sessions, each counted
    as many times as it can have requests in flight: `session_widths`; no more shards than the
    limit). Output: each shard's slots: at least 1, in proportion to its demand, the remainder
    to the largest fractions (the lower index on a tie); they add up to `limit`."""
    n, total = len(sessions), sum(sessions)
    if n > limit:
        raise ValueError(f"{n} shards cannot share a concurrency limit of {limit}")
    weights = sessions if total else [1] * n
    quota = [limit * w / sum(weights) for w in weights]
    out = [max(1, int(q)) for q in quota]
    while sum(out) > limit:  # the floors of 1 took more than their share: from the largest
        over = [i for i in range(n) if out[i] > 1]
        out[max(over, key=lambda i: (out[i] - quota[i], out[i]))] -= 1
    by_fraction = sorted(range(n), key=lambda i: (-(quota[i] - out[i]), i))
    for i in by_fraction[:limit - sum(out)]:
        out[i] += 1
    return out


def group_loads(plan: Plan, groups: list[list[str]]) -> list[int]:
    """Output: per group, its prompt tokens plus `REQUEST_COST_TOKENS` per request."""
    load: dict[str, int] = {}
    for r in plan.requests:
        load[r.session] = load.get(r.session, 0) + r.prompt_tokens + REQUEST_COST_TOKENS
    return [sum(load.get(s, 0) for s in g) for g in groups]


def session_groups(plan: Plan) -> list[list[str]]:
    """Output: the sessions that must run on one worker together, as groups in plan order (one
    group of all of them for a fail-fast plan)."""
    ids = [s.id for s in plan.sessions]
    for r in plan.requests:  # a session with requests but no `SessionInfo` still counts
        if r.session not in ids:
            ids.append(r.session)
    if plan.fail_fast:
        return [ids] if ids else []
    parent = {s: s for s in ids}
    position = {s: i for i, s in enumerate(ids)}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for a, b in cross_session_links(plan):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb, key=position.__getitem__)] = min(ra, rb, key=position.__getitem__)
    groups: dict[str, list[str]] = {}
    for s in ids:
        groups.setdefault(root(s), []).append(s)
    return list(groups.values())


def cross_session_links(plan: Plan) -> set[tuple[str, str]]:
    """Output: pairs of sessions that one request ties together: its dependencies, the replies
    its prompt carries (tool calls' arguments too), the loop it belongs to, the branches a fork
    keeps one of; and the copies of a session with a `concurrency` cap (one worker keeps the
    count of its copies running)."""
    session_of = {r.id: r.session for r in plan.requests}
    carried = carried_sessions(plan, session_of)
    links: set[tuple[str, str]] = set()
    capped: dict[str, str] = {}
    for info in plan.sessions:
        if info.cap is not None:
            first = capped.setdefault(info.name, info.id)
            if first != info.id:
                links.add((info.id, first))
    loops: dict[str, str] = {}
    for r in plan.requests:
        for other in (*(session_of.get(d) for d in r.deps),
                      *(carried.get(r.last_message, ()) if r.last_message is not None else ())):
            if other is not None and other != r.session:
                links.add((r.session, other))
        if r.stop_group is not None:
            first = loops.setdefault(r.stop_group, r.session)
            if first != r.session:
                links.add((r.session, first))
    for pick in plan.picks:  # a fork's kept branch is chosen from its branches' answers
        for end in pick.branches:
            other = session_of.get(end.last_request or "")
            if other is not None and other != pick.session:
                links.add((pick.session, other))
    return links


def carried_sessions(plan: Plan, session_of: dict[str, str]) -> dict[int, frozenset[str]]:
    """Output: message index -> the sessions whose replies (or partial turns) the conversation
    up to that message carries; a message carrying none is left out. Each message extends its
    parent's set, so this is linear in the messages whatever the conversations' lengths."""
    out: dict[int, frozenset[str]] = {}
    for i in message_order(plan):
        m = plan.messages[i]
        base = out.get(m.after, frozenset()) if m.after is not None else frozenset()
        own = {session_of[s.key] for s in segments(m.segs)
               if s.kind in ("reply", "partial") and s.key in session_of}
        carried = base | own if own - base else base
        if carried:
            out[i] = carried
    return out


def segments(segs: Iterable[Seg]) -> Iterator[Seg]:
    """Output: the segments and, inside each tool call, its arguments', depth first."""
    for s in segs:
        yield s
        yield from segments(a for _, a in s.args)


def message_order(plan: Plan) -> list[int]:
    """Output: every message index, each after the message it follows."""
    if all(m.after is None or m.after < i for i, m in enumerate(plan.messages)):
        return list(range(len(plan.messages)))
    order: list[int] = []
    seen: set[int] = set()
    for first in range(len(plan.messages)):
        chain = []
        i: int | None = first
        while i is not None and i not in seen:
            chain.append(i)
            seen.add(i)
            i = plan.messages[i].after
        order.extend(reversed(chain))
    return order


def shard_plan(plan: Plan, shard: Shard) -> Plan:
    """Output: `plan` with only the shard's sessions and requests and the shard's concurrency
    (the messages, gates and hash stay the whole plan's: records made from it are the
    whole run's records)."""
    keep = set(shard.sessions)
    return plan.model_copy(update={
        "sessions": tuple(s for s in plan.sessions if s.id in keep),
        "requests": tuple(r for r in plan.requests if r.session in keep),
        "concurrency": shard.concurrency})
