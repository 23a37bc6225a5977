"""When a session's request is due, beyond its dependencies and its phase.

Input: a planned request and the outcomes so far. Output: its planned wait (`planned_wait`):
`wait D` before it (`PRequest.wait_before`) and, for `wait reading RATE`, the time to read the
session's previous answer: its generated tokens at the planned seconds per token
(`PRequest.wait_per_token`), known only once that answer is in.
"""

from __future__ import annotations

from typing import Any, Mapping

from workloadlang.plan.model import PRequest


def planned_wait(req: PRequest, outcomes: Mapping[str, Any]) -> float:
    """Output: seconds `req` waits after its dependencies are done: its planned wait plus the
    reading time of the answer it follows (0 without `reading`, or when that answer is
    missing)."""
    return req.wait_before + reading_time(req, outcomes)


def reading_time(req: PRequest, outcomes: Mapping[str, Any]) -> float:
    """Output: the time to read the session's previous answer (`wait reading`): its generated
    tokens (as reported, else as streamed) times the planned seconds per token; 0 without
    one."""
    if not req.wait_per_token or not req.deps:
        return 0.0
    prev = outcomes.get(req.deps[0])
    if prev is None:
        return 0.0
    tokens = prev.completion_tokens if prev.completion_tokens is not None else \
        prev.streamed_tokens
    return req.wait_per_token * max(0, tokens or 0)
