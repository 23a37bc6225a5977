"""The planner's size limits: a plan larger than them is refused before it is built.

Input: `Limits` (defaults below; `wl plan` / `wl run` override them with `--max-requests`,
`--max-request-tokens`, `--max-total-tokens`) and, during the planner's walk, what it is about to
add. Output: nothing, or `TooBig` carrying a WL408 `Diagnostic` that names the statement.

Limits: the requests of the plan; the tokens of one request (prompt + generation, and so any one
filler, reply or conversation); the prompt tokens of all requests together. A loop (`repeat`,
`for`, `grow`, `spawn`, `session ... repeat`) of more iterations than the request limit is
refused at once, and so are all loops together past ten iterations per allowed request, a plan
of more than eight messages per allowed request, and messages made of more than sixteen parts
(literal texts, fillers, tool calls) per allowed request in all, a part of a named text counting
once for each message that sends it (what keeps `wl plan` under about 500 MB). A message's parts
are counted from the workload before it is made: texts made of texts (`text t2 = $t1, $t1`)
that double at each step are refused at once. A loop is also refused as soon as its first
iteration shows that its count of such iterations would pass a limit (a conversation that grows
by a step per iteration grows quadratically in total tokens), so that `repeat 1000000000000` or
`grow until 150k by 1` is refused in milliseconds, before anything of that size is made. A
sweep's points are planned into one `Budget` (`next_point`): together they are within the
limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloadlang import ir
from workloadlang.diagnostics import Diagnostic

DEFAULT_REQUESTS = 50_000
DEFAULT_REQUEST_TOKENS = 10_000_000
DEFAULT_TOTAL_TOKENS = 10_000_000_000
STEPS_PER_REQUEST = 10
MESSAGES_PER_REQUEST = 8
PARTS_PER_REQUEST = 16


@dataclass(frozen=True)
class Limits:
    requests: int = DEFAULT_REQUESTS
    request_tokens: int = DEFAULT_REQUEST_TOKENS
    total_tokens: int = DEFAULT_TOTAL_TOKENS


FLAGS = {"requests": "--max-requests", "request_tokens": "--max-request-tokens",
         "total_tokens": "--max-total-tokens"}


class TooBig(Exception):
    """The plan passes a limit; `diagnostic` says which, where, and how to raise it."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def refuse(what: str, limit_name: str, limit: int, span: ir.Span | None,
           beyond: str | None = None) -> TooBig:
    """WL408 for `what` (e.g. "the repeat count is 2,000,000"), more than `limit`."""
    return TooBig(Diagnostic(
        code="WL408", message=f"{what}, more than {beyond or f'the limit of {limit:,}'}",
        span=span,
        hint=f"lower the sizes, or raise the limit with {FLAGS[limit_name]} N if you mean it"))


@dataclass
class Snapshot:
    """The budget's counters when a loop starts (see `Budget.project`)."""

    requests: int
    total: int
    steps: int
    messages: int
    conversation: int
    parts: int


class Budget:
    """What the walk has planned so far, against `Limits`."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.requests = 0
        self.total = 0  # prompt tokens of the requests so far
        self.steps = 0  # loop iterations so far
        self.messages = 0
        self.parts = 0  # parts of the messages written as statements
        self.point: str | None = None  # the sweep's point being planned (`next_point`)
        self.before_point = 0  # the requests of the sweep's points before it

    def next_point(self, point: str) -> None:
        """The next point of a sweep (`point`: `n=7`) is planned into this budget: a sweep's
        points together are within the limits."""
        self.point, self.before_point = point, self.requests

    def explain(self, d: Diagnostic) -> Diagnostic:
        """A refusal (`TooBig`'s diagnostic), saying what the sweep's earlier points took."""
        if not (self.point and self.before_point):
            return d
        return d.model_copy(update={"message": f"{d.message} (the points of a sweep count "
                                    f"together: {self.before_point:,} requests before "
                                    f"{self.point})"})

    def size(self, tokens: int, what: str, span: ir.Span) -> None:
        """One size (a filler, a generation budget) larger than a request may be."""
        if tokens > self.limits.request_tokens:
            raise refuse(f"{what} is {tokens:,} tokens", "request_tokens",
                         self.limits.request_tokens, span)

    def count(self, n: int, what: str, span: ir.Span) -> None:
        """A loop of `n` iterations: refused when longer than the request limit."""
        if n > self.limits.requests:
            raise refuse(f"{what} is {n:,}", "requests", self.limits.requests, span)

    def step(self, span: ir.Span) -> None:
        self.steps += 1
        if self.steps > self.limits.requests * STEPS_PER_REQUEST:
            raise self._too_many_steps(f"the loops make more than {self.steps - 1:,} "
                                       "iterations in all", span)

    def _too_many_steps(self, what: str, span: ir.Span) -> TooBig:
        most = self.limits.requests * STEPS_PER_REQUEST
        return refuse(what, "requests", self.limits.requests, span,
                      beyond=f"{most:,} ({STEPS_PER_REQUEST} per request of the request limit)")

    def message(self, span: ir.Span) -> None:
        self.messages += 1
        if self.messages > self.limits.requests * MESSAGES_PER_REQUEST:
            raise self._too_many_messages(f"the plan has more than {self.messages - 1:,} "
                                          "messages", span)

    def _too_many_messages(self, what: str, span: ir.Span) -> TooBig:
        most = self.limits.requests * MESSAGES_PER_REQUEST
        return refuse(what, "requests", self.limits.requests, span,
                      beyond=f"{most:,} ({MESSAGES_PER_REQUEST} per request of the request "
                      "limit)")

    def text_parts(self, n: int, what: str, span: ir.Span) -> None:
        """A message of `n` parts (its named texts' counted in), before it is made: refused when
        the plan's messages would have too many parts with it."""
        if self.parts + n > self.limits.requests * PARTS_PER_REQUEST:
            before = f", after {self.parts:,} in the messages before it" if self.parts else ""
            raise self._too_many_parts(f"{what} is made of {n:,} parts (texts, fillers, tool "
                                       f"calls){before}", span)
        self.parts += n

    def _too_many_parts(self, what: str, span: ir.Span) -> TooBig:
        most = self.limits.requests * PARTS_PER_REQUEST
        return refuse(what, "requests", self.limits.requests, span,
                      beyond=f"{most:,} in all ({PARTS_PER_REQUEST} per request of the request "
                      "limit)")

    def request(self, rid: str, prompt: int, generation: int, span: ir.Span) -> None:
        """One more planned request."""
        lim = self.limits
        self.requests += 1
        self.total += prompt
        if self.requests > lim.requests:
            raise refuse(f"the plan has more than {lim.requests:,} requests (at {rid})",
                         "requests", lim.requests, span)
        if prompt + generation > lim.request_tokens:
            raise refuse(f"request {rid} needs {prompt + generation:,} tokens",
                         "request_tokens", lim.request_tokens, span)
        if self.total > lim.total_tokens:
            raise refuse(f"the prompts add up to more than {lim.total_tokens:,} tokens "
                         f"(at {rid})", "total_tokens", lim.total_tokens, span)

    def snapshot(self, conversation: int) -> Snapshot:
        return Snapshot(self.requests, self.total, self.steps, self.messages, conversation,
                        self.parts)

    def project(self, before: Snapshot, conversation: int, largest: int, n: int,
                what: str, span: ir.Span) -> None:
        """After a loop's first iteration (from `before` to now; its largest request needed
        `largest` tokens, its conversation has `conversation` tokens now): refuse when `n`
        iterations like it would pass a limit."""
        lim, left = self.limits, n - 1
        d_requests, d_total = self.requests - before.requests, self.total - before.total
        growth = max(0, conversation - before.conversation)
        steps = (self.steps - before.steps) * left
        if d_requests * left + self.requests > lim.requests:
            raise refuse(f"{what} would plan about {d_requests * n:,} requests", "requests",
                         lim.requests, span)
        messages = (self.messages - before.messages) * left
        if self.messages + messages > lim.requests * MESSAGES_PER_REQUEST:
            raise self._too_many_messages(f"{what} would make about {messages:,} more "
                                          "messages", span)
        parts = (self.parts - before.parts) * left
        if self.parts + parts > lim.requests * PARTS_PER_REQUEST:
            raise self._too_many_parts(f"{what} would make messages of about {parts:,} more "
                                       "parts", span)
        if self.steps + steps > lim.requests * STEPS_PER_REQUEST:
            raise self._too_many_steps(f"{what} would make about {steps:,} more loop "
                                       "iterations", span)
        if growth * left + (largest if d_requests else conversation) > lim.request_tokens:
            raise refuse(f"{what} would grow its conversation to about "
                         f"{conversation + growth * left:,} tokens", "request_tokens",
                         lim.request_tokens, span)
        total = self.total + d_total * left + d_requests * growth * left * (left + 1) // 2
        if total > lim.total_tokens:
            raise refuse(f"{what} would plan about {total:,} prompt tokens in all",
                         "total_tokens", lim.total_tokens, span)
