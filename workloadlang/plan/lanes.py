"""The lanes of a session: its requests, and the branches of its parallel forks.

Input: a session's planned requests in plan order (`PRequest.lane`: the parallel branches each
is in, outermost first, `FORK.BRANCH/...`). Output: its steps lane by lane (`lane_steps`: a
request, or a fork's branches, each a lane one level deeper) and how many of its requests can
be in flight at once (`width`). The runner walks the steps; the planner sizes the default
concurrency by the width.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from workloadlang.plan.model import PRequest

Step = tuple[PRequest, "PRequest | None", "list[list[PRequest]] | None"]


def lane_of(req: PRequest) -> list[str]:
    """The parallel branches a request is in, outermost first (`FORK.BRANCH` each)."""
    return req.lane.split("/") if req.lane else []


def lane_steps(reqs: Sequence[PRequest], depth: int) -> Iterator[Step]:
    """The steps of a lane `depth` branches deep: (request, the lane's next request or None,
    None) for a request of the lane; (the fork's first request, None, its branches' requests,
    branch by branch) for a parallel fork in it."""
    i = 0
    while i < len(reqs):
        parts = lane_of(reqs[i])
        if len(parts) == depth:
            nxt = reqs[i + 1] if i + 1 < len(reqs) and len(lane_of(reqs[i + 1])) == depth \
                else None
            yield reqs[i], nxt, None
            i += 1
            continue
        fork = parts[depth].split(".")[0]
        branches: dict[str, list[PRequest]] = {}
        while i < len(reqs):
            inner = lane_of(reqs[i])
            if len(inner) <= depth or inner[depth].split(".")[0] != fork:
                break
            branches.setdefault(inner[depth], []).append(reqs[i])
            i += 1
        yield branches[next(iter(branches))][0], None, list(branches.values())


def width(reqs: Sequence[PRequest], depth: int = 0) -> int:
    """The most requests of a lane (a session's, at depth 0) in flight at once: 1, or the
    widest of its forks (the sum of its branches' widths)."""
    best = 1 if reqs else 0
    for _, _, branches in lane_steps(reqs, depth):
        if branches is not None:
            best = max(best, sum(width(b, depth + 1) for b in branches))
    return best
