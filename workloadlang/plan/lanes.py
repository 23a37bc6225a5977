"""The lanes of a session: its requests, and the branches of its parallel forks.

Input: a session's planned requests in plan order (`PRequest.lane`: the parallel branches each
is in, outermost first, `FORK.BRANCH/...`). Output: its steps lane by lane (`lane_steps`: a
request, or a fork's branches, each a lane one level deeper) and how many of its requests can
be in flight at once (`width`), and the most tokens they can demand at once (`demand`, and
over sessions under a concurrency limit, `peak_demand`). The runner walks the steps; the
planner sizes the default concurrency by the width, and the dry-run's peak concurrent demand
by the demand. A session's `concurrency` cap lets at most that many of its copies run at once
(`within_caps`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from workloadlang.plan.model import PRequest

Step = tuple[PRequest, "PRequest | None", "list[list[PRequest]] | None"]
T = TypeVar("T")


def lane_of(req: PRequest) -> list[str]:
    """The parallel branches a request is in, outermost first (`FORK.BRANCH` each)."""
    return req.lane.split("/") if req.lane else []


def lane_steps(reqs: Sequence[PRequest], depth: int) -> Iterator[Step]:
    """The steps of a lane `depth` branches deep: (request, the lane's next request or None,
    None) for a request of the lane; (the fork's first request, None, its branches' requests,
    branch by branch) for a parallel fork in it."""
    lanes = [lane_of(r) for r in reqs]  # each request's lane split once
    i = 0
    while i < len(reqs):
        parts = lanes[i]
        if len(parts) == depth:
            nxt = reqs[i + 1] if i + 1 < len(reqs) and len(lanes[i + 1]) == depth else None
            yield reqs[i], nxt, None
            i += 1
            continue
        fork = parts[depth].split(".")[0] + "."  # `FORK.`: a branch of it starts so
        branches: dict[str, list[PRequest]] = {}
        while i < len(reqs):
            inner = lanes[i]
            if len(inner) <= depth or not inner[depth].startswith(fork):
                break
            branches.setdefault(inner[depth], []).append(reqs[i])
            i += 1
        yield branches[next(iter(branches))][0], None, list(branches.values())


def width(reqs: Sequence[PRequest], depth: int = 0) -> int:
    """The most requests of a lane (a session's, at depth 0) in flight at once: 1, or the
    widest of its forks (the sum of its branches' widths)."""
    best = 1 if reqs else 0
    for _, _, branches in lane_steps(reqs, depth):
        if branches is not None:  # a branch of one request is 1 wide (most of a wide fork's)
            best = max(best, sum(1 if len(b) == 1 else width(b, depth + 1) for b in branches))
    return best


def by_session(reqs: Sequence[Any]) -> dict[str, list[Any]]:
    """Requests (or anything with `session` and `lane`) grouped by session, in plan order."""
    out: dict[str, list[Any]] = {}
    for r in reqs:
        out.setdefault(r.session, []).append(r)
    return out


Caps = Mapping[str, "tuple[str, int]"]
"""The session copies of a session with a `concurrency` cap: copy id -> (session, cap)."""


def in_flight(reqs: Sequence[Any], caps: Caps | None = None) -> int:
    """How many requests can be in flight at once: one per session copy, or its widest
    parallel fork's branches; of a capped session's copies, at most its cap (the widest)."""
    widths = {s: width(rs) if any(r.lane for r in rs) else 1
              for s, rs in by_session(reqs).items()}
    return sum(within_caps(widths, caps or {}, lambda w: w))


def caps_of(sessions: Sequence[Any]) -> Caps:
    """The copies of capped sessions (`SessionInfo`s: `id`, `name`, `cap`): copy id ->
    (session, cap)."""
    return {s.id: (s.name, s.cap) for s in sessions if s.cap is not None}


def within_caps(per_copy: Mapping[str, T], caps: Caps, size: Callable[[T], int]) -> list[T]:
    """Input: a value per session copy, the caps, the size of a value. Output: the values of
    the copies that can run at once: every uncapped copy's, and of each capped session the cap
    largest of its copies'."""
    out: list[T] = []
    groups: dict[tuple[str, int], list[T]] = {}
    for sid, v in per_copy.items():
        if sid in caps:
            groups.setdefault(caps[sid], []).append(v)
        else:
            out.append(v)
    for (_, cap), vs in groups.items():
        out.extend(sorted(vs, key=size, reverse=True)[:cap])
    return out


Profile = list[int]
"""A lane's demand: `p[k - 1]` is the most tokens (prompt and reply) at most k of its requests
in flight at once hold; non-decreasing, `len(p)` its width."""


def demand(reqs: Sequence[PRequest], size: Callable[[PRequest], int], depth: int = 0
           ) -> Profile:
    """The demand profile of a lane (a session's, at depth 0): one request at a time of its
    own, and of each parallel fork any request of each branch at once (branches go at their
    own pace, so any of their requests can be in flight together)."""
    best: Profile = []
    for req, _, branches in lane_steps(reqs, depth):
        step = [size(req)] if branches is None else side_by_side(
            [[size(b[0])] if len(b) == 1 else demand(b, size, depth + 1) for b in branches])
        best = upper(best, step)
    return best


def upper(a: Profile, b: Profile) -> Profile:
    """The larger of two profiles at each count (a shorter one holds its last value)."""
    n = max(len(a), len(b))
    return [max(a[min(k, len(a) - 1)] if a else 0, b[min(k, len(b) - 1)] if b else 0)
            for k in range(n)]


def side_by_side(profiles: Sequence[Profile], cap: int | None = None) -> Profile:
    """The profile of lanes in flight together: for each count, the best split of it among
    them, each taking none or some of its requests (max-plus convolution), up to `cap`.
    Concave profiles (every request after the first adds no more than the one before: a branch
    of one request at a time, a fork of equal branches) are merged by their steps, largest
    first, exact and in n log n (a fork of 50,000 branches); the others are split exactly
    while that takes under `DP_BUDGET` steps, else bounded from above by their concave
    envelopes (`steps`)."""
    concave = [p for p in profiles if is_concave(p)]
    other = [p for p in profiles if not is_concave(p)]
    total = sum(len(p) for p in profiles)
    if total * sum(len(p) for p in other) > DP_BUDGET:
        return from_steps([x for p in profiles for x in steps(p)], cap)
    best = [0, *from_steps([x for p in concave for x in steps(p)], cap)]
    for p in other:
        q = [0, *p]
        n = len(best) + len(q) - 1 if cap is None else min(cap + 1, len(best) + len(q) - 1)
        best = [max(best[i] + q[k - i] for i in range(max(0, k - len(q) + 1),
                                                      min(k, len(best) - 1) + 1))
                for k in range(n)]
    return best[1:]


def is_concave(p: Profile) -> bool:
    """Whether each step of `p` (from 0) is no larger than the one before."""
    return all(p[k + 1] - p[k] <= p[k] - (p[k - 1] if k else 0) for k in range(len(p) - 1))


def steps(p: Profile) -> list[float]:
    """The steps of `p`'s upper concave envelope from 0 (its own steps when it is concave),
    largest first: the envelope of points (k, p[k - 1]) by a monotone chain, in linear time."""
    hull = [(0, 0)]
    for k, y in enumerate(p, 1):
        while len(hull) > 1 and (hull[-1][1] - hull[-2][1]) * (k - hull[-1][0]) <= \
                (y - hull[-1][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append((k, y))
    out: list[float] = []
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        out += [(y1 - y0) / (x1 - x0)] * (x1 - x0)
    return out


def from_steps(xs: list[float], cap: int | None) -> Profile:
    """The profile that takes the largest of the steps `xs` first (at most `cap` of them);
    a fractional sum (an envelope's) rounded up."""
    xs = sorted(xs, reverse=True)[:cap]
    out, at = [], 0.0
    for x in xs:
        at += x
        out.append(math.ceil(at - 1e-6))
    return out


DP_BUDGET = 2_000_000
"""Steps of the exact split over sessions (`peak_demand`) above which the bound is used."""


def peak_demand(profiles: Sequence[Profile], concurrency: int) -> tuple[int, int]:
    """Input: each session's demand profile and the concurrency limit. Output: the most tokens
    the requests in flight at once can hold, and how many requests that is at most (the limit,
    or every session's width when that is less). Sessions of width 1 take their peaks largest
    first; the wider ones are split exactly (`side_by_side`), or, past `DP_BUDGET`, bounded
    from above by their concave envelopes (`envelope_bound`)."""
    narrow = sorted((p[0] for p in profiles if len(p) == 1), reverse=True)
    wide = [p for p in profiles if len(p) > 1]
    n = min(concurrency, len(narrow) + sum(len(p) for p in wide))
    if n == len(narrow) + sum(len(p) for p in wide):
        return sum(p[-1] for p in profiles if p), n
    if len(wide) * min(n, sum(len(p) for p in wide)) * max((len(p) for p in wide), default=0) \
            > DP_BUDGET:
        return envelope_bound(profiles, n), n
    split = [0, *side_by_side(wide, cap=n)]
    prefix = [0]
    for x in narrow:
        prefix.append(prefix[-1] + x)
    return max(split[j] + prefix[min(n - j, len(narrow))] for j in range(len(split))), n


def envelope_bound(profiles: Sequence[Profile], n: int) -> int:
    """An upper bound on `peak_demand`: the n largest steps of the profiles' upper concave
    envelopes (exact when every profile is concave, as a fork of equal branches is)."""
    return math.ceil(sum(sorted((x for p in profiles for x in steps(p)), reverse=True)[:n])
                     - 1e-6)
