"""An answer's stream, parsed: SSE (or a plain JSON body) -> an `Outcome`.

Input: the body's chunks as they come, each with when it reached the socket when the transport
can tell (`workloadlang.wire.Stamps`). Output: `Outcome`, what one request measured: TTFT from
the first non-empty delta's arrival, the streamed text (content and reasoning kept apart),
usage, the cached-token evidence with its source, the engine's timings and any error.

SSE is parsed by hand, line by line on raw bytes (`Stream.feed_line`): `data:` with or without a
space, comment pings and `event:` lines ignored, `event: error` / `{"error": ...}` surfaced, one
malformed chunk recorded without ending the read. The per-chunk path does no pydantic work; a
token event's time is its chunk's arrival stamp where the transport stamps (no clock read), else
one clock read. The gaps between token events' times are the answer's inter-token latencies
(`Outcome.itl_s`). An answer past its bounds (`token_budget`,
`byte_budget`, `MAX_LINE_BYTES`) is cut as an `overrun`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, computed_field

from workloadlang.redact import redact
from workloadlang.results import ErrorKind
from workloadlang.run import evidence
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.errors import ErrorInfo, excerpt, message_from_json
from workloadlang.wire import Stamps


def loads(data: bytes | str) -> Any:
    """Output: the decoded JSON (orjson; Python's json for what orjson refuses but it reads:
    lone surrogate escapes, NaN, integers beyond 64 bits). Raises ValueError."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)



_LATE_READ_S = 0.001  # a first-token stamp that may be more than this much late is flagged
MAX_LINE_BYTES = 1 << 20  # an SSE line (one chunk) longer than this is an `overrun`


def token_budget(max_tokens: int) -> int:
    """Output: how many token events an answer to `max_tokens` may send before it is cut as an
    `overrun`: twice the budget and 256 more (an engine may split a token over events, or count
    a few of its own), however little was asked."""
    return 2 * max_tokens + 256


def byte_budget(max_tokens: int) -> int:
    """Output: how many body bytes an answer to `max_tokens` may send before it is cut as an
    `overrun`: 1 MiB, and 1 KiB per token event of `token_budget` (a chunk of one token is
    about 200 bytes)."""
    return (1 << 20) + 1024 * token_budget(max_tokens)


class Outcome(BaseModel):
    """What one request measured. Times are seconds; `t_send` is on the injected monotonic clock,
    `t_send_unix` wall-clock. TTFT is the first non-empty content / reasoning / reasoning_content /
    tool_calls delta; `ttft_content_s` the first content delta. `streamed_*` count token events
    (chunks), `completion_tokens` / `prompt_tokens` come from the engine's usage. `cached_tokens`
    is None when the engine said nothing (`cached_source == "none"`). `ttft_late_s` is set when
    the first token came in a read of several packets (the kernel's count) with more of the
    stream behind it (later tokens, the end): the read's stamp is its newest packet's, and the
    first token may have come up to that much earlier, back to when the socket was last seen
    without it — its TTFT may be up to that much too long (None: its stamp is its own, to 1 ms).
    `itl_s`: the gap between each token event's arrival and the one before it (one fewer than
    `streamed_tokens`; 0 between events that came in one read)."""

    model_config = ConfigDict(frozen=True)

    id: str
    t_send: float
    t_send_unix: float
    ttft_s: float | None = None
    ttft_content_s: float | None = None
    ttft_late_s: float | None = None
    e2e_s: float
    itl_s: list[float] = []
    content: str = ""
    reasoning: str = ""
    streamed_tokens: int = 0
    streamed_content_tokens: int = 0
    streamed_reasoning_tokens: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cached_source: str = evidence.NONE
    timings: dict[str, Any] | None = None
    server_prefill_ms: float | None = None
    server_ttft_ms: float | None = None
    finish_reason: str | None = None
    aborted: bool = False
    http_status: int | None = None
    error: ErrorInfo | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def suspicious(self) -> list[str]:
        """Output: findings that the cached/prompt/timings numbers do not add up."""
        return evidence.suspicious_flags(
            self.prompt_tokens, self.cached_tokens, self.cached_source, self.timings
        )

    @property
    def ok(self) -> bool:
        """Output: True when the request completed without any error."""
        return self.error is None


class Answer(NamedTuple):
    """An answer read cleanly to its end, as the next request that replays it needs it (the
    realiser's `Reply`): given to `send`'s `then` before its `Outcome` is made."""

    content: str
    reasoning: str
    completion_tokens: int | None


class Stream:
    """Mutable per-request accumulator: the lean hot path of the SSE reader (plain attributes, no
    pydantic). `feed_line` returns True when reading must stop."""

    __slots__ = (
        "clock", "t0", "abort_after", "content", "reasoning", "n_tokens", "n_content",
        "n_reasoning", "ttft", "ttft_content", "finish_reason", "done", "aborted", "event",
        "usage_seen", "prompt", "completion", "cached", "timings", "server", "error",
        "n_malformed", "status", "t_end", "arrival", "t0_unix", "ttft_late", "buf", "stopped",
        "answered", "hold", "looped", "max_events", "max_bytes", "n_bytes", "n_chunks",
        "idle_cut", "times",
    )

    def __init__(self, clock: Callable[[], float], abort_after: int | None,
                 max_tokens: int | None = None) -> None:
        self.clock = clock
        self.t0 = self.t0_unix = 0.0
        self.abort_after = abort_after
        # the answer's bounds (`token_budget`, `byte_budget`): past them it is an `overrun`
        self.max_events = None if max_tokens is None else token_budget(max_tokens)
        self.max_bytes = None if max_tokens is None else byte_budget(max_tokens)
        self.n_bytes = self.n_chunks = 0  # body bytes and chunks fed so far
        self.idle_cut = False  # the idle watch cut it (`_IdleWatch`)
        self.content: list[Any] = []
        self.reasoning: list[Any] = []
        self.n_tokens = self.n_content = self.n_reasoning = 0
        self.times: list[float] = []  # each token event's arrival (the gaps: `itl_s`)
        self.ttft: float | None = None
        self.ttft_content: float | None = None
        self.finish_reason: str | None = None
        self.done = self.aborted = self.usage_seen = False
        self.event: bytes | None = None
        self.prompt: int | None = None
        self.completion: int | None = None
        self.cached: tuple[int | None, str] = (None, evidence.NONE)
        self.timings: dict[str, Any] | None = None
        self.server: tuple[float | None, float | None] = (None, None)
        self.error: ErrorInfo | None = None
        self.n_malformed = 0
        self.status: int | None = None
        self.t_end: float | None = None
        self.arrival: float | None = None  # when the chunk being parsed reached the socket
        self.ttft_late: float | None = None  # see `_check_first_read`
        self.buf = b""  # the SSE line begun and not ended yet
        self.stopped = False  # a line said to stop reading (`feed_line`)
        self.answered = False  # `then` was called, at the answer's end (`_take_reads`)
        self.hold: Awaitable[None] | None = None  # what `then` returned then
        self.looped = False  # the rest of the body is read on the loop (`read_on_loop`)

    def now(self) -> float:
        """Output: the time of the data being parsed: its arrival stamp from the transport when
        there is one (so a busy event loop does not inflate TTFT), else the clock now."""
        return self.arrival if self.arrival is not None else self.clock()

    # ------------------------------------------------------------------ errors
    def fail(self, kind: ErrorKind, message: str, status: int | None = None, body: str | None = None) -> None:
        """Record an error. The first error wins, except that a non-fatal `malformed` is replaced by
        the terminal error (its count is kept in the message)."""
        if self.error is not None and self.error.kind != "malformed":
            return
        if self.error is not None:
            message = f"{message} (after {self.n_malformed} malformed chunk(s))"
            body = body or self.error.body
        self.error = ErrorInfo(kind=kind, message=message, status=status, body=body)

    def engine_error(self, payload: bytes | str, obj: Any = None) -> None:
        """Record an in-stream engine error from its payload (JSON or text)."""
        if obj is None:
            try:
                obj = loads(payload)
            except ValueError:
                obj = None
        msg = message_from_json(obj) or excerpt(payload, 200) or "(empty error event)"
        self.fail("engine", f"engine error in stream: {msg}", self.status, excerpt(payload))

    def malformed(self, payload: bytes, why: str) -> None:
        """Record a chunk that could not be used; reading continues."""
        self.n_malformed += 1
        if self.error is None:
            self.error = ErrorInfo(
                kind="malformed", message=f"malformed SSE chunk: {why}", status=self.status,
                body=excerpt(payload),
            )

    # ------------------------------------------------------------------ SSE
    def feed_line(self, line: bytes) -> bool:
        """Input: one SSE line without its terminator. Output: True to stop reading."""
        if not line:
            self.event = None  # a blank line ends an SSE event
            return False
        if line.startswith(b"data:"):
            return self.feed_data(line[5:].strip())
        if line.startswith(b"event:"):
            self.event = line[6:].strip()
        return False  # comments (":" pings), id:, retry:, anything else

    def feed_data(self, payload: bytes) -> bool:
        """Input: one `data:` payload. Output: True to stop reading."""
        if payload == b"[DONE]":
            self.done = True
            return True
        if self.event == b"error":
            self.engine_error(payload)
            return True
        try:
            obj = loads(payload)
        except ValueError:
            self.malformed(payload, "invalid JSON")
            return False
        if type(obj) is not dict:
            self.malformed(payload, "not a JSON object")
            return False
        try:
            return self.feed_chunk(obj)
        except (AttributeError, TypeError, IndexError, KeyError):
            self.malformed(payload, "unexpected chunk shape")
            return False

    def feed_chunk(self, obj: dict[str, Any]) -> bool:
        """Input: one decoded chunk. Output: True to stop (engine error or abort target reached)."""
        if obj.get("error") or obj.get("object") == "error":  # OpenAI/llama.cpp, older vLLM
            self.engine_error(json.dumps(obj), obj)
            return True
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta and self.feed_delta(delta):
                return True
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
        if obj.get("usage") or obj.get("timings") or choices is None or "prompt_progress" in obj:
            self.absorb(obj)
        return False

    def feed_delta(self, delta: dict[str, Any]) -> bool:
        """Input: `choices[0].delta`. Output: True when the abort target is reached."""
        text = delta.get("content")
        think = delta.get("reasoning") or delta.get("reasoning_content")
        if not (text or think or delta.get("tool_calls")):
            return False  # role-only / empty deltas are not tokens
        now = self.now()
        self.times.append(now)
        if self.ttft is None:
            self.ttft = max(now - self.t0, 0.0)
        if text:
            self.content.append(text)
            self.n_content += 1
            if self.ttft_content is None:
                self.ttft_content = max(now - self.t0, 0.0)
        if think:
            self.reasoning.append(think)
            self.n_reasoning += 1
        self.n_tokens += 1
        if self.abort_after is not None and self.n_tokens >= self.abort_after:
            self.aborted = True
            return True
        if self.max_events is not None and self.n_tokens > self.max_events:
            self.fail("overrun", f"the engine sent more than {self.max_events:,} token events "
                      "for this request's max_tokens; the rest was not read", self.status)
            return True
        return False

    def over_bytes(self, size: int, line: int) -> bool:
        """Count `size` more body bytes; with the line being read now `line` bytes long.
        Output: True (an `overrun` recorded) when the body or one line is past its bound."""
        self.n_bytes += size
        if self.max_bytes is not None and self.n_bytes > self.max_bytes:
            self.fail("overrun", f"the answer is over {self.max_bytes:,} bytes for this "
                      "request's max_tokens; the rest was not read", self.status)
            return True
        if line > MAX_LINE_BYTES:
            self.fail("overrun", f"an SSE line is over {MAX_LINE_BYTES:,} bytes without its end; "
                      "the rest was not read", self.status)
            return True
        return False

    def absorb(self, doc: dict[str, Any]) -> None:
        """Input: a chunk or body carrying usage / timings / native fields. Updates counts and the
        cached evidence (a later chunk never resets a known value to unknown)."""
        usage = evidence.usage_of(doc)
        if usage is not None:
            self.usage_seen = True
        prompt = evidence.prompt_total(doc)
        if prompt is not None:
            self.prompt = prompt
        completion = evidence.completion_total(doc)
        if completion is not None:
            self.completion = completion
        self.cached = evidence.merge_cached(self.cached, evidence.find_cached(doc))
        timings = doc.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        server = evidence.server_times(doc)
        if server != (None, None):
            self.server = server

    def end_of_stream(self) -> None:
        """Called when the body ended without a stop condition: classify cut / early stop."""
        if self.done or self.aborted or (self.error is not None and self.error.kind != "malformed"):
            return
        if self.finish_reason is None:
            self.fail(
                "stream_cut",
                f"stream ended without [DONE] or a finish_reason after {self.n_tokens} token events",
                self.status,
            )

    def check_abort_target(self) -> None:
        """After a normal end: a planned abort that never happened is an `early_stop` error."""
        if self.abort_after is None or self.aborted:
            return
        if self.error is not None and self.error.kind != "malformed":
            return
        self.fail(
            "early_stop",
            f"stream finished before the abort target ({self.n_tokens} < {self.abort_after} tokens)",
            self.status,
        )

    # ------------------------------------------------------------------ result
    def outcome(self, endpoint: Endpoint, req_id: str, t_send_unix: float, t_end: float) -> Outcome:
        """Output: the immutable `Outcome` (the only pydantic construction of the request)."""
        error = self.error
        if error is not None and error.kind == "malformed" and self.n_malformed > 1:
            error = error.model_copy(update={"message": f"{error.message} ({self.n_malformed} malformed chunks)"})
        if error is not None and endpoint.api_key is not None:  # never keep an echoed key
            key = endpoint.api_key.get_secret_value()
            error = error.model_copy(update={"message": redact(error.message, key),
                                             "body": redact(error.body or "", key) or error.body})
        cached, source = evidence.resolve_cached(
            self.cached[0], self.cached[1], self.usage_seen, endpoint.cached_zero_when_absent
        )
        return Outcome(
            id=req_id, t_send=self.t0, t_send_unix=t_send_unix, ttft_s=self.ttft,
            ttft_content_s=self.ttft_content, ttft_late_s=self.ttft_late, e2e_s=t_end - self.t0,
            itl_s=gaps(self.times),
            content=join_text(self.content),
            reasoning=join_text(self.reasoning), streamed_tokens=self.n_tokens,
            streamed_content_tokens=self.n_content, streamed_reasoning_tokens=self.n_reasoning,
            completion_tokens=self.completion, prompt_tokens=self.prompt, cached_tokens=cached,
            cached_source=source, timings=self.timings, server_prefill_ms=self.server[0],
            server_ttft_ms=self.server[1], finish_reason=self.finish_reason, aborted=self.aborted,
            http_status=self.status, error=error,
        )


def gaps(times: list[float]) -> list[float]:
    """Input: the token events' arrival times, in order. Output: the gap before each after the
    first (never negative: two stamps of one read are equal)."""
    return [max(0.0, b - a) for a, b in zip(times, times[1:])]


def join_text(parts: list[Any]) -> str:
    """Input: streamed text pieces. Output: their concatenation (non-strings JSON-encoded)."""
    return "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)


def read_cleanly(state: Stream) -> bool:
    """Output: True when the answer was read to its end without error or abort."""
    return state.done and state.error is None and not state.aborted


def answer_of(state: Stream) -> Answer:
    """Output: the `Answer` of a stream read to its end (its content joined once)."""
    content = join_text(state.content)
    state.content = [content]
    return Answer(content, join_text(state.reasoning), state.completion)



def feed_chunk(chunk: bytes, state: Stream, stamps: Stamps | None) -> bool:
    """Input: the body's next chunk (after `state.buf`, the line begun before it) and the
    transport's stream it came from (None: no stamps). Feeds its complete lines. Output: True
    when reading must stop (then `state.stopped`)."""
    if stamps is not None:
        state.arrival = stamps.arrival
    state.n_chunks += 1
    if b"\n" not in chunk and b"\r" not in chunk:
        if state.over_bytes(len(chunk), len(state.buf) + len(chunk)):
            state.stopped = True
            return True
        state.buf = state.buf + chunk if state.buf else chunk
        return False
    if state.over_bytes(len(chunk), 0):
        state.stopped = True
        return True
    buf = state.buf + chunk if state.buf else chunk
    lines = buf.splitlines()
    buf = state.buf = b"" if buf[-1] in (10, 13) else lines.pop()
    first = stamps is not None and state.ttft is None
    for i, line in enumerate(lines):
        stop = state.feed_line(line)
        if first and stamps is not None and state.ttft is not None:
            first = False
            check_first_read(state, stamps.doubt, bool(buf) or any(
                later.startswith(b"data:") for later in lines[i + 1:]))
        if stop:
            state.stopped = True
            return True
    if stamps is not None and state.ttft_content is not None and not state.looped:
        state.looped = True
        stamps.read_on_loop()  # both first-token times are in: the end needs no more
    return False


def check_first_read(state: Stream, doubt: float, more: bool) -> None:
    """Input: how much earlier than its stamp the read holding the first token may have begun
    (the transport's `doubt`: 0 when the kernel counted one packet for it) and whether that read
    held more of the stream after the first token's event (`more`). The stamp is the newest
    packet's: with more after the first token (later tokens, the end), the first one may have
    come up to `doubt` earlier than its stamp says (`ttft_late_s`); without, it was in the newest
    packet and its stamp is its own."""
    if more and doubt > _LATE_READ_S:
        state.ttft_late = doubt


def read_json_body(body: bytes, state: Stream) -> None:
    """A non-streamed answer: take message text and usage from the body (no TTFT is invented)."""
    try:
        obj = loads(body)
    except ValueError:
        state.fail("malformed", "response is neither SSE nor valid JSON", state.status, excerpt(body))
        return
    if not isinstance(obj, dict):
        state.fail("malformed", "response JSON is not an object", state.status, excerpt(body))
        return
    if obj.get("error"):
        state.engine_error(body, obj)
        return
    try:
        choice = (obj.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        state.content.append(message.get("content") or "")
        state.reasoning.append(message.get("reasoning") or message.get("reasoning_content") or "")
        state.finish_reason = choice.get("finish_reason")
        state.absorb(obj)
    except (AttributeError, TypeError, IndexError, KeyError):
        state.fail("malformed", "unexpected response JSON shape", state.status, excerpt(body))
        return
    state.done = True


def prefill_time(o: Outcome) -> tuple[float | None, str | None]:
    """Time spent prefilling: the engine's own figure when it reports one (llama.cpp
    `timings.prompt_ms` excludes queueing, so concurrent sessions waiting on one slot do not look
    degraded), else the client's TTFT."""
    if o.server_prefill_ms is not None:
        return o.server_prefill_ms / 1000, "server"
    return o.ttft_s, None if o.ttft_s is None else "client_ttft"
