"""The plan: a deterministic, salted request schedule, in tokens.

Input: built by `workloadlang.plan.planner.build_plan` from an `ir.Workload`, resolved params and a
salt. Output: printed as the dry-run (`workloadlang.plan.dryrun`), serialised to JSON (`wl plan
--json`), realised into text lazily (`workloadlang.plan.realise`) and executed by
`workloadlang.run`.

Conversations are stored once: every message lives in `Plan.messages` and names the message it
follows in its conversation (`after`); a request's prompt is its last message
(`PRequest.last_message`) and the chain before it (`Plan.message_ids`). A conversation that grows
by 4,000 turns costs 8,000 messages and 4,000 requests, not 16 million message references, in
memory and in the JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from workloadlang.ir import Calibrate, Gate, ReportItem, Span
from workloadlang.results import Slo


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def unless(default: Any) -> Any:
    """A field that the plan's JSON (and so its hash) leaves out while it holds `default`: a
    construct a plan does not use adds nothing to it."""
    return Field(default, exclude_if=lambda v: v == default)


class Seg(Frozen):
    """A planned piece of message content.

    `text`: literal text (`text`, or a long text held once in the plan's table: `Plan.texts[ref]`,
    `Plan.text_of`). `filler`: salted synthetic text of `tokens` tokens named by `key`
    (with a needle sentence at `needle_at` when set), or, when `text` is set, that many tokens
    of `text`'s words (a dataset's: `filler N from NAME`). `reply` / `partial`: the reply (or the
    partial, aborted turn) of request `key`, known only at run time; `tokens` is the planned size;
    `content_only`: its content without its reasoning (`replay content`). `call`: a tool call
    with id `key`, tool name `text` and `args` (name, text or filler segment); `tokens` counts
    its arguments and `CALL_TOKENS` of markup.
    """

    kind: Literal["text", "filler", "reply", "partial", "call"]
    tokens: int
    text: str = ""
    key: str = ""
    needle_at: float | None = None
    synthetic: bool = False
    content_only: bool = unless(False)
    args: tuple[tuple[str, Seg], ...] = unless(())
    ref: int | None = unless(None)


Role = Literal["system", "user", "assistant", "tool", "join"]
"""A planned message's role (`join`: a branch's conversation, chosen at run time)."""


class PMessage(Frozen):
    """One message; `after` is the message before it in its conversation (None: the first).
    A `tool` message answers the tool call whose id is `call_id`. A `join` (no content, never
    sent) stands for the conversation of the branch that `Plan.picks[pick]` keeps, chosen at run
    time; `after` is its first branch's end (what the plan counts)."""

    role: Role
    segs: tuple[Seg, ...]
    after: int | None = None
    call_id: str = unless("")
    pick: int | None = unless(None)


class BranchEnd(Frozen):
    """Where a branch of a fork ended: its conversation's last message and the last request
    sent on it (the request before the fork when the branch sent none)."""

    last_message: int | None
    last_request: str | None


class Pick(Frozen):
    """`keep first|longest` of a fork: the parent goes on from the branch that finished first
    (its last request's answer ended first), or whose last request's prompt and reply were the
    longest, as the engine counted them; among branches without error, the first on a tie;
    branch 0 when none. Decided at run time once every branch has ended."""

    session: str
    rule: Literal["first", "longest"]
    branches: tuple[BranchEnd, ...]
    span: Span


class Expectation(Frozen):
    """A check on the reply text: it must contain `text` (the needle's code for a needle)."""

    what: Literal["needle", "text"]
    text: str


RequestKind = Literal["reply", "probe", "resend"]


class PRequest(Frozen):
    """One planned request, in schedule order.

    `last_message`: the last message of its prompt (`Plan.message_ids` gives them all).
    `expected_cached` is what a perfect prefix cache would serve from the requests certainly
    finished before this one is sent, `prefix_source` the earlier request whose prompt (and
    reply) provides that prefix; `expected_cached_max`, when set, what it could serve if
    requests of concurrent sessions finished first (see `Plan.assumptions`). `lru_cached`: what
    an LRU cache of `Plan.cache_model` would serve (with `--cache-tokens`). `send_at`: the
    planned send time in seconds from the run's start (trace requests), not sent earlier.
    `stop_group`/`stop_iter`: the loop instance with an `until` condition this request belongs
    to, and its iteration. `isolated`: nothing else of the run is in flight from its send to
    its end.
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
    last_message: int | None
    new_tokens: int
    prompt_tokens: int
    expected_cached: int
    prefix_source: str | None = None
    expected_cached_max: int | None = None
    lru_cached: int | None = None
    max_tokens: int
    abort_after: int | None = None
    reply_kept: Literal["replay", "content", "synthetic", "drop", "partial"] = "drop"
    options: dict[str, Any] = {}
    expect: tuple[Expectation, ...] = ()
    stop_group: str | None = None
    stop_on: Literal["miss", "hit", "error"] | None = None
    stop_iter: int | None = None
    wait_before: float = 0.0
    # `wait reading RATE`: seconds per token of the session's previous answer, waited on top of
    # `wait_before` (the answer's length is known at run time)
    wait_per_token: float | None = unless(None)
    # timed alone: the runner lets the run's other requests end first and starts none until
    # this one has ended (docs/language.md "isolated")
    isolated: bool = False
    send_at: float | None = None
    # the branches of `spawn ... parallel` it is in, outermost first: `FORK.BRANCH/...`
    lane: str = unless("")
    span: Span


class SessionInfo(Frozen):
    """A session copy: `start_s` its planned start (an arrival, seconds from the run's start;
    None: at the start), `cap` its session's `concurrency` (copies running at once)."""

    id: str
    name: str
    copy_index: int
    requests: int
    peak_tokens: int
    start_s: float | None = unless(None)
    cap: int | None = unless(None)


class GatePlan(Frozen):
    """A gate with the number of planned requests each of its metric selectors reads, per scope
    key (`overall` or a session id)."""

    gate: Gate
    reads: dict[str, int]


class Totals(Frozen):
    """Sums over the requests. `expected_cached_max_tokens`: with what concurrent sessions could
    add (when any could); `lru_cached_tokens`: what the LRU cache of `Plan.cache_model` serves."""

    requests: int
    prompt_tokens: int
    cold_tokens: int
    expected_cached_tokens: int
    expected_cached_max_tokens: int | None = None
    lru_cached_tokens: int | None = None
    max_tokens: int
    peak_inflight_tokens: int
    working_set_tokens: int


class CacheModel(Frozen):
    """The LRU cache the plan's `lru_cached` figures are for: `tokens` of capacity in blocks of
    `block` tokens."""

    tokens: int
    block: int


class TraceInfo(Frozen):
    """A trace file a session replays: where it was read, its format and content hash, how
    many records it holds and how many the plan took (after offset, limit and sampling)."""

    session: str
    path: str
    format: Literal["mooncake", "workloadlang"]
    sha256: str
    records: int
    selected: int
    sessions: int
    block_tokens: int
    time_scale: float


class DatasetInfo(Frozen):
    """A dataset messages take text from: where it was read, its format and content hash, the
    items it holds, those the plan took in its salted order and the words `filler N from`
    took."""

    name: str
    path: str
    format: Literal["sharegpt", "jsonl", "folder"]
    sha256: str
    items: int
    taken: int
    filler_words: int


Seg.model_rebuild()

CHAINS_KEPT = 256  # prompts' message chains a plan keeps made (`Plan.message_ids`)


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
    assumptions: tuple[str, ...] = ()
    cache_model: CacheModel | None = None
    traces: tuple[TraceInfo, ...] = ()
    picks: tuple[Pick, ...] = unless(())
    # the SLOs a request must meet to count towards goodput (`slo { }`); the run's duration
    # and its warm-up and cool-down windows, left out of the metrics (seconds; settings)
    slo: Slo | None = unless(None)
    duration_s: float | None = unless(None)
    warmup_s: float | None = unless(None)
    cooldown_s: float | None = unless(None)
    texts: tuple[str, ...] = unless(())  # the long literal texts, each once (`Seg.ref`)
    datasets: tuple[DatasetInfo, ...] = unless(())
    _chains: dict[int, tuple[int, ...]] = PrivateAttr(default_factory=dict)

    def message_ids(self, req: PRequest) -> tuple[int, ...]:
        """The indices of a request's prompt messages, in order: its `after` chain, made from
        the chain of an earlier prompt when one of the last few made ends on the way (the
        runner asks for a request's messages several times, and a conversation's next request
        extends the one before). A `join` is in it as planned (the realiser resolves it)."""
        return self.chain(req.last_message)

    def chain(self, last: int | None) -> tuple[int, ...]:
        """The indices of the conversation ending with message `last`, in order."""
        if last is None:
            return ()
        made = self._chains
        found = made.get(last)
        if found is not None:
            return found
        tail: list[int] = []
        i: int | None = last
        while i is not None and i not in made:
            tail.append(i)
            i = self.messages[i].after
        tail.reverse()
        out = (() if i is None else made[i]) + tuple(tail)
        if len(made) >= CHAINS_KEPT:
            del made[next(iter(made))]
        made[last] = out
        return out

    def text_of(self, seg: Seg) -> str:
        """The literal text of a `text` segment, from the table when it is held there."""
        return seg.text if seg.ref is None else self.texts[seg.ref]

    def prompt_messages(self, req: PRequest) -> list[PMessage]:
        """The messages of a request's prompt, in order."""
        return [self.messages[i] for i in self.message_ids(req)]

    def by_id(self) -> dict[str, PRequest]:
        return {r.id: r for r in self.requests}
