"""The typed intermediate representation of a `.wl` workload.

Input: produced by `workloadlang.parse` (Lark tree -> IR lowering).
Output: consumed by `workloadlang.check` (semantic checks) and `workloadlang.plan` (the planner).

Every node is a frozen pydantic model carrying the `Span` it came from, so a diagnostic, a planned
request or a failed gate can always name its `.wl` line. Unions are tagged with a `kind` field.
The base, values and expressions are `workloadlang.irexpr` (re-exported here).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from workloadlang.irexpr import (  # noqa: F401
    BinOp,
    Bool,
    Call,
    Expr,
    ListExpr,
    Neg,
    Node,
    Not,
    Null,
    Num,
    ObjExpr,
    Option,
    Ref,
    Span,
    Str,
    UnitKind,
)

# ---------------------------------------------------------------- params

ParamType = Literal["int", "float", "tokens", "duration", "ratio", "bool", "string"]


class Range(Node):
    """`in LO..HI`; either bound may be absent (`in 1..`)."""

    low: Expr | None = None
    high: Expr | None = None
    span: Span


class Param(Node):
    """`name: type [list] [= default] [in lo..hi] [one of "a", "b"] [doc "..."]`.

    No default means required. A default that references other params is a derived value.
    `choices` restricts a string param to a set. `is_list` makes it a list of `type`
    (`lengths: tokens list = [50k, 100k]`; on the command line `--lengths 50k,100k`); `in` then
    applies to each element. `sweep`: a list of values `wl run` runs the workload with, once
    each, into one results file.
    """

    name: str
    type: ParamType
    is_list: bool = False
    default: Expr | None = None
    range: Range | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""
    sweep: Expr | None = None
    span: Span


# ---------------------------------------------------------------- message content

class TextPart(Node):
    """A literal string."""

    kind: Literal["text"] = "text"
    value: str
    span: Span


class FillerPart(Node):
    """`filler TOKENS [needle at DEPTH]`: salted synthetic text of TOKENS tokens, optionally with a
    needle sentence inserted at a depth (a ratio of the filler)."""

    kind: Literal["filler"] = "filler"
    tokens: Expr
    needle_at: Expr | None = None
    span: Span


class ExprPart(Node):
    """A string expression as a part: a string param or loop variable (`$question`), a
    computed string, or `$NAME` of a named text (`text NAME = ...`), whose parts it stands for."""

    kind: Literal["expr"] = "expr"
    value: Expr
    span: Span


ArgPart = Annotated[TextPart | FillerPart | ExprPart, Field(discriminator="kind")]


class CallArg(Node):
    """`KEY = PART` in a tool call's arguments: a literal string (an `ExprPart` when it
    formats values into itself: `"src/mod{$i}.py"`) or a filler."""

    key: str
    value: ArgPart
    span: Span


class CallPart(Node):
    """`call NAME { KEY = PART, ... }`: a tool call of an assistant turn, sent as one of its
    `tool_calls` (OpenAI chat format) with the arguments as a JSON object of strings. The
    `tool` messages after it answer its calls in order."""

    kind: Literal["call"] = "call"
    name: str
    args: tuple[CallArg, ...] = ()
    span: Span


class ReplyPart(Node):
    """`reply NAME [ [INDEX] ]`: the content of the answer of an earlier request of the session
    named `NAME` (its run `INDEX` in a loop or spawn), as the engine gave it: a sub-agent's
    (or a fork branch's) result sent back to its parent, as its `tool` message."""

    kind: Literal["reply"] = "reply"
    name: str
    index: Expr | None = None
    span: Span


class DataPart(Node):
    """Text from a dataset (`dataset NAME = PATH`): `prompt NAME [ [INDEX] ]` an item's prompt,
    the next one in the run's salted order or item INDEX of the file; `answer NAME [ [INDEX] ]`
    the answer the dataset recorded for it (without INDEX: for the item this session's last
    `prompt NAME` took); `filler TOKENS from NAME` TOKENS tokens of the dataset's text (the next
    items', joined), cut to size by the engine's tokenizer."""

    kind: Literal["data"] = "data"
    what: Literal["prompt", "answer", "filler"]
    dataset: str
    index: Expr | None = None
    tokens: Expr | None = None
    span: Span


ContentPart = Annotated[TextPart | FillerPart | CallPart | ExprPart | ReplyPart | DataPart,
                        Field(discriminator="kind")]


class Text(Node):
    """`text NAME = PART, ...` at the workload's top: content declared once. Wherever a message
    has `$NAME` as a part it is the same bytes (its filler is keyed by the text's name, not by
    the session), so every session that sends it shares it as a prefix."""

    name: str
    parts: tuple[ContentPart, ...]
    span: Span


class Dataset(Node):
    """`dataset NAME = PATH`: a file (ShareGPT-style JSON, JSONL of prompts) or a folder of
    text files whose prompts and answers messages take (`DataPart`); read when the workload is
    planned (`workloadlang.dataset`)."""

    name: str
    path: Expr
    span: Span


# ---------------------------------------------------------------- checks on the reply

class Expect(Node):
    """`expect reply contains needle` or `expect reply contains "text"`."""

    what: Literal["needle", "text"]
    text: str = ""
    span: Span


# ---------------------------------------------------------------- statements

class Message(Node):
    """`system ...`, `user ...`, `assistant ...`, `tool ...`: append a message to the current
    conversation. A `call` part belongs in an assistant message; a `tool` message is the result
    of the oldest call of the conversation not answered yet."""

    kind: Literal["message"] = "message"
    role: Literal["system", "user", "assistant", "tool"]
    parts: tuple[ContentPart, ...]
    span: Span


ReplyMode = Literal["replay", "content", "synthetic", "drop"]


class Reply(Node):
    """`reply MAX [replay [content]|synthetic|drop] [abort after N] [as NAME] [label L]
    [options {..}] [expect ..] [call NAME {..}]`.

    Sends the conversation so far as one request. `replay` (default) appends the reply verbatim as
    the next assistant turn, its reasoning included; `replay content` (mode `content`) appends
    its content without the reasoning, as most chat templates do; `synthetic` appends a stand-in
    of the same length; `drop` appends nothing. With `abort after N` the client closes the stream
    after N streamed tokens and the partial turn (content and reasoning) is what gets appended.
    `calls` are tool calls the appended turn carries after the reply.
    """

    kind: Literal["reply"] = "reply"
    max_tokens: Expr
    mode: ReplyMode = "replay"
    abort_after: Expr | None = None
    name: str | None = None
    label: str | None = None
    options: tuple[Option, ...] = ()
    expect: tuple[Expect, ...] = ()
    isolated: bool = False  # timed alone: nothing else of the run in flight (docs/language.md)
    calls: tuple[CallPart, ...] = ()
    span: Span


class Probe(Node):
    """`probe [MAX] [as NAME] [label L] [options {..}] [expect cached]`: a prefill-only request
    (max_tokens 1 unless given); its reply is never appended. `expect_cached`: its prompt was
    sent before this run, so a cache that kept it serves all of it but its last token."""

    kind: Literal["probe"] = "probe"
    max_tokens: Expr | None = None
    name: str | None = None
    label: str | None = None
    options: tuple[Option, ...] = ()
    isolated: bool = False
    expect_cached: bool = False
    span: Span


class Resend(Node):
    """`resend NAME[idx] [max_tokens N] [label L]`: send exactly the prompt of an earlier named
    request again (same bytes)."""

    kind: Literal["resend"] = "resend"
    name: str
    index: Expr | None = None
    max_tokens: Expr | None = None
    label: str | None = None
    isolated: bool = False
    span: Span


class Wait(Node):
    """`wait [DURATION] [reading RATE]`: pause this session for DURATION (a settle or think
    time, possibly a random draw), plus the time to read the session's previous answer at RATE
    tokens per second (known at run time, from the answer's length)."""

    kind: Literal["wait"] = "wait"
    duration: Expr | None = None
    reading: Expr | None = None
    span: Span


class Turn(Node):
    """`turn NAME { ... }`: a labelled group; requests inside get label NAME unless they set one."""

    kind: Literal["turn"] = "turn"
    name: str
    body: tuple[Stmt, ...]
    isolated: bool = False
    span: Span


class Phase(Node):
    """`phase NAME { ... }`: a barrier across all sessions at its start and its end."""

    kind: Literal["phase"] = "phase"
    name: str
    body: tuple[Stmt, ...]
    span: Span


StopOn = Literal["miss", "hit", "error"]


class For(Node):
    """`for VAR in [reverse] LO..HI [until miss|hit|error] [label L] { ... }` (HI exclusive), or
    `for VAR in [reverse] LIST ...` over a list value.

    `until` stops the loop early at run time, after the first request of an iteration whose
    outcome matches; the remaining iterations are skipped (and recorded as skipped).
    """

    kind: Literal["for"] = "for"
    var: str
    low: Expr | None = None
    high: Expr | None = None
    over: Expr | None = None
    reverse: bool = False
    until: StopOn | None = None
    label: str | None = None
    body: tuple[Stmt, ...]
    isolated: bool = False
    span: Span


class Repeat(Node):
    """`repeat N [as VAR] [label L] { ... }`: a for loop from 0."""

    kind: Literal["repeat"] = "repeat"
    count: Expr
    var: str | None = None
    label: str | None = None
    body: tuple[Stmt, ...]
    isolated: bool = False
    span: Span


class Grow(Node):
    """`grow until SIZE by STEP [as VAR] [label L] { ... }`: ceil(SIZE / STEP) iterations (at least
    one). Growth is counted in new planned tokens; replayed replies come on top."""

    kind: Literal["grow"] = "grow"
    until: Expr
    by: Expr
    var: str | None = None
    label: str | None = None
    body: tuple[Stmt, ...]
    isolated: bool = False
    span: Span


class Keep(Node):
    """`keep first|longest|INDEX` of a fork: the parent goes on from the conversation of one
    branch: the first to finish, the one with the longest conversation at its end (its last
    request's prompt and reply as the engine counted them), or the one at INDEX."""

    rule: Literal["first", "longest", "index"]
    index: Expr | None = None
    span: Span


class Spawn(Node):
    """`spawn N cold|fork [parallel] [keep ...] [as VAR] [label L] { ... }`: N sub-conversations,
    run one after another, or all in flight at once with `parallel`.

    `cold` starts each from an empty conversation; `fork` from a copy of the parent's. The
    parent's conversation is untouched afterwards, unless `keep` names the branch it goes on
    from.
    """

    kind: Literal["spawn"] = "spawn"
    count: Expr
    mode: Literal["cold", "fork"] = "cold"
    var: str | None = None
    label: str | None = None
    body: tuple[Stmt, ...]
    isolated: bool = False
    parallel: bool = False
    keep: Keep | None = None
    span: Span


class Fresh(Node):
    """`fresh [label L] { ... }`: run the body in a new empty conversation (a `spawn 1 cold`)."""

    kind: Literal["fresh"] = "fresh"
    label: str | None = None
    body: tuple[Stmt, ...]
    isolated: bool = False
    span: Span


class If(Node):
    """`if COND { ... } [else { ... }]`, decided at plan time from params."""

    kind: Literal["if"] = "if"
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()
    span: Span


Stmt = Annotated[
    Message | Reply | Probe | Resend | Wait | Turn | Phase | For | Repeat | Grow | Spawn | Fresh | If,
    Field(discriminator="kind"),
]


class TraceSource(Node):
    """`trace PATH [{ time_scale = ..., offset = ..., limit = ..., sample = ...,
    block_tokens = ..., max_tokens = ..., label = ... }]` of a trace session: the file to
    replay and how (docs/traces.md)."""

    path: Expr
    options: tuple[Option, ...] = ()
    span: Span


class Arrival(Node):
    """`arrive every GAP [burst K]`: copy 0 starts at 0, each next one GAP later (K copies at
    a time with `burst`; GAP may be a random draw, one per gap); `arrive at TIMES`: copy k at
    the k-th time of a list (one time: every copy then)."""

    how: Literal["every", "at"]
    value: Expr
    burst: Expr | None = None
    span: Span


class Session(Node):
    """`session NAME [repeat N] [arrive ...] [concurrency C] { ... }`: N concurrent copies
    (`NAME#0` ...), started together, or each at its arrival (`arrive`), at most C running at
    once.
    `session NAME trace PATH [{...}]`: one copy per session of the trace, each request of the
    trace a request, sent at its time (`trace`; no body)."""

    name: str
    repeat: Expr | None = None
    body: tuple[Stmt, ...]
    trace: TraceSource | None = None
    arrive: Arrival | None = None
    concurrency: Expr | None = None  # at most this many copies running at once
    # `turns every GAP`: the copies' requests at the instants of an arrival process
    turns: Expr | None = Field(None, exclude_if=lambda v: v is None)
    span: Span


# ---------------------------------------------------------------- calibration

class Calibrate(Node):
    """`calibrate ttft_threshold [tokens N] [repeat K]` or `calibrate chars_per_token`.

    Run before the sessions; results are usable in gates as `$ttft_threshold`, `$cold_ttft`,
    `$hit_ttft`, `$chars_per_token`.
    """

    what: Literal["ttft_threshold", "chars_per_token"]
    tokens: Expr | None = None
    repeat: Expr | None = None
    span: Span


# ---------------------------------------------------------------- gates and report

class SelItem(Node):
    """One item of a metric selector `{...}`.

    `key` is None for a bare word, which matches a request's label or phase; otherwise one of
    `label`, `phase`, `session`. Flags (`warm`, `cold`, `hit`, `miss`, `aborted`, `ok`, `probe`)
    filter; `last N` / `first N` take a window in schedule order.
    """

    key: Literal["name", "label", "phase", "session", "flag", "last", "first"]
    value: str = ""
    count: Expr | None = None
    span: Span


class MetricRef(Node):
    """`metric{selector}`: the per-request values of a metric over the selected requests."""

    kind: Literal["metric"] = "metric"
    metric: str
    selector: tuple[SelItem, ...] = ()
    span: Span


class Agg(Node):
    """`agg(metric{...})`: median, mean, min, max, sum, count, p50, p90, p95, p99, all, any,
    fraction."""

    kind: Literal["agg"] = "agg"
    func: str
    arg: MetricRef
    span: Span


class GNum(Node):
    kind: Literal["gnum"] = "gnum"
    value: Expr  # a plan-time expression (params, numbers, calibration results)
    span: Span


class GBin(Node):
    kind: Literal["gbin"] = "gbin"
    op: Literal["+", "-", "*", "/"]
    left: GExpr
    right: GExpr
    span: Span


class GCall(Node):
    """`max(a, b)` / `min(a, b)` over gate expressions (e.g. scale a baseline only upwards)."""

    kind: Literal["gcall"] = "gcall"
    func: Literal["max", "min"]
    args: tuple[GExpr, ...]
    span: Span


GExpr = Annotated[MetricRef | Agg | GNum | GBin | GCall, Field(discriminator="kind")]


CmpOp = Literal["<", "<=", ">", ">=", "==", "!="]


class Condition(Node):
    """`when LHS [CMP RHS]` of a gate: where it is false, the gate does not apply. Read like a
    gate's own test (a bare `metric{...}` on the left: every selected value; without `CMP RHS`
    the left side must be true). `text`: the condition as written (to show where it decided)."""

    left: GExpr
    op: CmpOp | None = None
    right: GExpr | None = None
    text: str
    span: Span


class Gate(Node):
    """`NAME: [each session|overall] LHS [CMP RHS] [when COND] [-> verdict] [warn]`.

    A bare `metric{...}` on the left means every selected value must satisfy the comparison.
    Without `CMP RHS` the left side must be true (`all(ok{needle})`). With `when`, the gate
    applies only where its condition holds (`Condition`); a gate without one leaves the field
    out of its JSON, so the plans (and hashes) of workloads that do not use it are unchanged.
    """

    name: str
    scope: Literal["overall", "each_session"] = "overall"
    left: GExpr
    op: CmpOp | None = None
    right: GExpr | None = None
    when: Condition | None = Field(None, exclude_if=lambda v: v is None)
    verdict: str | None = None
    severity: Literal["fail", "warn"] = "fail"
    span: Span


class ReportItem(Node):
    """`NAME: gexpr [as percent|tokens|seconds] [by index|session|label]` in `report { }`: a headline
    number of the summary; with `by`, one number per group (e.g. pp per context level)."""

    name: str
    value: GExpr
    fmt: Literal["number", "percent", "tokens", "seconds"] = "number"
    by: Literal["index", "session", "label"] | None = None
    span: Span


# ---------------------------------------------------------------- the workload

class Settings(Node):
    """Workload-level settings (`name = expr`), each optional."""

    concurrency: Expr | None = None
    settle: Expr | None = None
    timeout: Expr | None = None
    fail_fast: Expr | None = None
    hit_ratio: Expr | None = None
    max_context: Expr | None = None
    # the run's length and the stretches at its start and end left out of the metrics
    duration: Expr | None = Field(None, exclude_if=lambda v: v is None)
    warmup: Expr | None = Field(None, exclude_if=lambda v: v is None)
    cooldown: Expr | None = Field(None, exclude_if=lambda v: v is None)
    span: Span | None = None


class Workload(Node):
    name: str
    doc: str = ""
    params: tuple[Param, ...] = ()
    settings: Settings
    options: tuple[Option, ...] = ()
    calibrations: tuple[Calibrate, ...] = ()
    texts: tuple[Text, ...] = ()
    datasets: tuple[Dataset, ...] = Field((), exclude_if=lambda v: not v)  # none: left out
    sessions: tuple[Session, ...] = ()
    gates: tuple[Gate, ...] = ()
    report: tuple[ReportItem, ...] = ()
    # `slo { ttft = 2s, ... }`: the bounds of goodput (docs/metrics.md)
    slo: tuple[Option, ...] = Field((), exclude_if=lambda v: v == ())
    span: Span


for _m in list(globals().values()):
    if isinstance(_m, type) and issubclass(_m, Node) and _m is not Node:
        _m.model_rebuild()
