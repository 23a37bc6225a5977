"""The plan: a deterministic, salted request schedule, in tokens.

Input: built by `workloadlang.plan.planner.build_plan` from an `ir.Workload`, resolved params and a
salt. Output: printed as the dry-run (`workloadlang.plan.render`), serialised to JSON (`wl plan
--json`), realised into text lazily (`workloadlang.plan.realise`) and executed by
`workloadlang.run`.

Conversations are stored once: every message lives in `Plan.messages` and a request's prompt is a
tuple of indices into it, so a conversation that grows by 30 steps costs 30 messages, not 465.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from workloadlang.ir import Calibrate, Gate, ReportItem, Span


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Seg(Frozen):
    """A planned piece of message content.

    `text`: literal text. `filler`: salted synthetic text of `tokens` tokens named by `key`
    (with a needle sentence at `needle_at` when set). `reply` / `partial`: the reply (or the
    partial, aborted turn) of request `key`, known only at run time; `tokens` is the planned size.
    """

    kind: Literal["text", "filler", "reply", "partial"]
    tokens: int
    text: str = ""
    key: str = ""
    needle_at: float | None = None
    synthetic: bool = False


class PMessage(Frozen):
    role: Literal["system", "user", "assistant"]
    segs: tuple[Seg, ...]


class Expectation(Frozen):
    """A check on the reply text: it must contain `text` (the needle's code for a needle)."""

    what: Literal["needle", "text"]
    text: str


RequestKind = Literal["reply", "probe", "resend"]


class PRequest(Frozen):
    """One planned request, in schedule order.

    `expected_cached` is what a perfect prefix cache would serve, `prefix_source` the earlier
    request whose prompt (and reply) provides that prefix. `stop_group`/`stop_iter`: the loop
    instance with an `until` condition this request belongs to, and its iteration.
    `isolated`: nothing else of the run is in flight from its send to its end.
    """

    id: str
    seq: int
    session: str
    session_name: str
    copy_index: int
    phase: str
    label: str
    index: int
    kind: RequestKind
    name: str | None = None
    deps: tuple[str, ...] = ()
    messages: tuple[int, ...]
    new_tokens: int
    prompt_tokens: int
    expected_cached: int
    prefix_source: str | None = None
    max_tokens: int
    abort_after: int | None = None
    reply_kept: Literal["replay", "synthetic", "drop", "partial"] = "drop"
    options: dict[str, Any] = {}
    expect: tuple[Expectation, ...] = ()
    stop_group: str | None = None
    stop_on: Literal["miss", "hit", "error"] | None = None
    stop_iter: int | None = None
    wait_before: float = 0.0
    # timed alone: the runner lets the run's other requests end first and starts none until
    # this one has ended (docs/language.md "isolated")
    isolated: bool = False
    span: Span


class SessionInfo(Frozen):
    id: str
    name: str
    copy_index: int
    requests: int
    peak_tokens: int


class GatePlan(Frozen):
    """A gate with the number of planned requests each of its metric selectors reads, per scope
    key (`overall` or a session id)."""

    gate: Gate
    reads: dict[str, int]


class Totals(Frozen):
    requests: int
    prompt_tokens: int
    cold_tokens: int
    expected_cached_tokens: int
    max_tokens: int
    peak_inflight_tokens: int
    working_set_tokens: int


class Plan(Frozen):
    workload: str
    doc: str
    source: str
    params: dict[str, Any]
    salt: str
    plan_hash: str = ""
    concurrency: int
    timeout_s: float
    fail_fast: bool
    hit_ratio: float
    max_context: int | None
    phases: tuple[str, ...]
    sessions: tuple[SessionInfo, ...]
    messages: tuple[PMessage, ...]
    requests: tuple[PRequest, ...]
    calibrations: tuple[Calibrate, ...]
    gates: tuple[GatePlan, ...]
    report: tuple[ReportItem, ...]
    totals: Totals

    def prompt_messages(self, req: PRequest) -> list[PMessage]:
        """The messages of a request's prompt, in order."""
        return [self.messages[i] for i in req.messages]

    def by_id(self) -> dict[str, PRequest]:
        return {r.id: r for r in self.requests}
