"""The streaming chat client: one OpenAI-compatible `/chat/completions` exchange -> an `Outcome`.

`send(client, endpoint, req)` posts a streamed chat request and returns what was measured:
client-side TTFT (monotonic, from just before the request is sent), the streamed text (content and
reasoning kept apart), usage, the cached-token evidence with its source, raw llama.cpp timings and
any error. It never raises for transport, HTTP or stream problems — they become `Outcome.error`
with everything measured so far kept. Only `asyncio.CancelledError` propagates, and the connection
is closed on the way out, so a request still in prefill can be cancelled.

SSE is parsed by hand, line by line on raw bytes (see `_Stream.feed_line`): `data:` with or
without a space, comment pings and `event:` lines ignored, `event: error` / `{"error": ...}`
surfaced, one malformed chunk recorded without ending the read. The per-chunk path does no
pydantic work and no per-chunk clock reads after the first token.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Awaitable, Callable, NamedTuple

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, computed_field, model_validator

from . import evidence
from .transport import ConnectionDropped, build_request, dispatch, payload_head
from .errors import ErrorInfo, ErrorKind, engine_message, excerpt, message_from_json, redact


def _loads(data: bytes | str) -> Any:
    """Output: the decoded JSON (orjson; Python's json for what orjson refuses but it reads:
    lone surrogate escapes, NaN, integers beyond 64 bits). Raises ValueError."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(obj: Any) -> bytes:
    """Output: compact UTF-8 JSON (orjson; Python's json for integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def dumps_kept(obj: Any) -> bytes:
    """Output: `dumps(obj)` in a bytes object of its own size, for bytes kept for long (each
    message of a conversation, encoded once): orjson's output keeps the whole buffer it was
    written into — with tracemalloc, a 3 KB message held 32 KB and a 100 KB one 1 MB."""
    return bytes(memoryview(dumps(obj)))


_FORBIDDEN_HEADERS = ("x-conversation-id",)  # makes llama.cpp streams resumable: never send it
_ERROR_BODY_LIMIT = 64 * 1024
_FINISH_BODY_S = 1.0
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


class Endpoint(BaseModel):
    """Where and how to talk to the engine.

    `base_url` is the OpenAI base (`…/v1`, trailing `/` stripped); `root_url` is derived from it by
    removing only a trailing `/v1` (engine-native routes such as `/metrics`, `/tokenize`, `/props`
    live there). `api_key` is a secret: it never appears in repr, str or JSON dumps.
    `cached_zero_when_absent` is the user's declaration that the engine leaves the cached field out
    when it is 0 (vLLM `--enable-prompt-tokens-details`, SGLang `--enable-cache-report`)."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    root_url: str = ""
    model: str
    api_key: SecretStr | None = None
    cached_zero_when_absent: bool = False
    # how long an answer may send nothing once its first token is in (None: no limit): a
    # stalled stream is cut then (`idle`), long before the request's total deadline
    idle_timeout_s: float | None = Field(default=60.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _derive_urls(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("base_url"), str):
            data = dict(data)
            data["base_url"] = data["base_url"].rstrip("/")
            if not data.get("root_url"):
                data["root_url"] = root_of(data["base_url"])
        return data

    @property
    def chat_url(self) -> str:
        """Output: the chat-completions URL."""
        return self.base_url + "/chat/completions"

    def auth_headers(self) -> dict[str, str]:
        """Output: `{"Authorization": "Bearer …"}` when a key is set, else `{}`."""
        return auth_headers(self.api_key)


def root_of(base_url: str) -> str:
    """Input: an OpenAI base URL. Output: the server root: trailing `/` stripped and only a
    trailing `/v1` removed (never every occurrence of `/v1`)."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def auth_headers(api_key: SecretStr | str | None) -> dict[str, str]:
    """Input: an API key (secret, plain or None). Output: the Authorization header dict."""
    if api_key is None:
        return {}
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    return {"Authorization": f"Bearer {key}"} if key else {}


class WireRequest(BaseModel):
    """One chat request as sent. `messages` are chat messages, each a dict or its JSON encoding
    already made (bytes, used as they are). `options` are merged into the body as-is (None
    values left out); `abort_after` closes the stream after that many streamed token events;
    `deadline_s` is the TOTAL time allowed for the whole exchange; `budget_cut`: it is what was
    left of the run's time budget, less than the workload's timeout (a request cut there was
    stopped by the run, not by a slow engine, and its error says so)."""

    model_config = ConfigDict(frozen=True)

    id: str
    messages: list[dict[str, Any] | bytes]
    max_tokens: int = Field(ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    abort_after: int | None = Field(default=None, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)
    deadline_s: float = Field(default=600.0, gt=0)
    budget_cut: bool = False


class Outcome(BaseModel):
    """What one request measured. Times are seconds; `t_send` is on the injected monotonic clock,
    `t_send_unix` wall-clock. TTFT is the first non-empty content / reasoning / reasoning_content /
    tool_calls delta; `ttft_content_s` the first content delta. `streamed_*` count token events
    (chunks), `completion_tokens` / `prompt_tokens` come from the engine's usage. `cached_tokens`
    is None when the engine said nothing (`cached_source == "none"`). `ttft_late_s` is set when
    the first token came in a read of several packets (the kernel's count) with more of the
    stream behind it (later tokens, the end): the read's stamp is its newest packet's, and the
    first token may have come up to that much earlier, back to when the socket was last seen
    without it — its TTFT may be up to that much too long (None: its stamp is its own, to 1 ms)."""

    model_config = ConfigDict(frozen=True)

    id: str
    t_send: float
    t_send_unix: float
    ttft_s: float | None = None
    ttft_content_s: float | None = None
    ttft_late_s: float | None = None
    e2e_s: float
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


class _Stream:
    """Mutable per-request accumulator: the lean hot path of the SSE reader (plain attributes, no
    pydantic). `feed_line` returns True when reading must stop."""

    __slots__ = (
        "clock", "t0", "abort_after", "content", "reasoning", "n_tokens", "n_content",
        "n_reasoning", "ttft", "ttft_content", "finish_reason", "done", "aborted", "event",
        "usage_seen", "prompt", "completion", "cached", "timings", "server", "error",
        "n_malformed", "status", "t_end", "arrival", "t0_unix", "ttft_late", "buf", "stopped",
        "answered", "hold", "looped", "max_events", "max_bytes", "n_bytes", "n_chunks",
        "idle_cut",
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
                obj = _loads(payload)
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
            obj = _loads(payload)
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
        now = None
        if self.ttft is None:
            now = self.now()
            self.ttft = max(now - self.t0, 0.0)
        if text:
            self.content.append(text)
            self.n_content += 1
            if self.ttft_content is None:
                self.ttft_content = max((now if now is not None else self.now()) - self.t0, 0.0)
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
            content=_join(self.content),
            reasoning=_join(self.reasoning), streamed_tokens=self.n_tokens,
            streamed_content_tokens=self.n_content, streamed_reasoning_tokens=self.n_reasoning,
            completion_tokens=self.completion, prompt_tokens=self.prompt, cached_tokens=cached,
            cached_source=source, timings=self.timings, server_prefill_ms=self.server[0],
            server_ttft_ms=self.server[1], finish_reason=self.finish_reason, aborted=self.aborted,
            http_status=self.status, error=error,
        )


def _join(parts: list[Any]) -> str:
    """Input: streamed text pieces. Output: their concatenation (non-strings JSON-encoded)."""
    return "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)


def build_body(endpoint: Endpoint, req: WireRequest) -> dict[str, Any]:
    """Input: endpoint and request. Output: the JSON body: model, messages, max_tokens,
    `stream: true`, `stream_options.include_usage`, then `req.options` (None values left out)."""
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": req.messages,
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for key, value in req.options.items():
        if value is not None:
            body[key] = value
    return body


def encode_body(endpoint: Endpoint, req: WireRequest) -> bytes:
    """Input: endpoint and request. Output: `build_body` as compact JSON, byte for byte what
    `dumps(build_body(...))` gives for dict messages (see `body_parts`)."""
    return b"".join(body_parts(endpoint, req))


def body_parts(endpoint: Endpoint, req: WireRequest) -> list[bytes]:
    """Input: endpoint and request. Output: the pieces of `encode_body`, in order: a message
    given as bytes is a piece as it is (a conversation re-sent with one more turn encodes only
    the new turn), so that the body, or the body behind its head, is copied once."""
    body = build_body(endpoint, req)
    parts = [dumps({"model": body.pop("model")})[:-1], b',"messages":[']
    for m in body.pop("messages"):
        parts.append(m if isinstance(m, bytes) else dumps(m))
        parts.append(b",")
    if len(parts) > 2:
        parts.pop()
    parts.append(b"],")
    parts.append(dumps(body)[1:])
    return parts


def build_headers(endpoint: Endpoint, req: WireRequest) -> dict[str, str]:
    """Input: endpoint and request. Output: request headers (JSON content type, bearer auth when a
    key is set, then `req.headers`), never `X-Conversation-Id`."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    headers.update(endpoint.auth_headers())
    for name, value in req.headers.items():
        if name.lower() not in _FORBIDDEN_HEADERS:
            headers[name] = value
    return headers


def build(endpoint: Endpoint, req: WireRequest, body: bytes | None = None) -> httpx.Request:
    """Output: the ready-to-send httpx request (body encoded once, unless given as `body`; its
    timeouts set to the total deadline so they never cut a long prefill first; only our own
    headers). Raises httpx.InvalidURL / UnsupportedProtocol, TypeError or ValueError for what
    cannot be sent."""
    return build_request("POST", endpoint.chat_url, build_headers(endpoint, req),
                         encode_body(endpoint, req) if body is None else body, req.deadline_s)


def head_of(endpoint: Endpoint, req: WireRequest) -> bytes:
    """Output: the HTTP/1.1 request head that `build(endpoint, req)` is written with, up to its
    last header, `Content-Length`, which the body decides: `head + content_length(len(body)) +
    body` are the bytes written for it. Raises as `build` does, and ValueError when that head does
    not end with the length."""
    return payload_head(build(endpoint, req, b"{}"))


def warm_up() -> None:
    """Load what the first `send` would otherwise load on the clock: anyio's asyncio backend,
    imported on the first cancel scope (~30 ms). Call inside the event loop, before timing."""
    with anyio.move_on_after(1):
        pass


_TIMEOUT = getattr(asyncio, "timeout", None)  # Python >= 3.11


async def within(seconds: float, work: Awaitable[None]) -> bool:
    """Input: a deadline in seconds and the awaitable to run in this task. Output: True when
    the deadline cancelled it. A cancel scope in this task, not `asyncio.wait_for` (a new task:
    one more trip through a busy event loop). The standard library's `asyncio.timeout` where
    there is one (3.11+), else anyio's `move_on_after`: the same scope, but anyio's looks up the
    running library and task several times per use, a cost a saturated client feels."""
    if _TIMEOUT is not None:
        try:
            async with _TIMEOUT(seconds):
                await work
        except TimeoutError:
            return True
        return False
    with anyio.move_on_after(seconds) as scope:
        await work
    return scope.cancelled_caught


async def send(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    req: WireRequest,
    *,
    request: httpx.Request | None = None,
    clock: Callable[[], float] = time.perf_counter,
    wallclock: Callable[[], float] = time.time,
    then: Callable[[Answer], Awaitable[None] | None] | None = None,
    on_cancel: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Input: a shared httpx client, the endpoint, one request, optionally `request` already made
    from it by `build` (whose timeouts are then at least `req.deadline_s`), (for tests) the
    clocks, and `then`: called with the `Answer` once the answer was read to its end without
    error or abort and its connection is back in the pool, before anything else is done with
    it; when it returns an awaitable (it sent what comes next and asks to wait), the `Outcome`
    is made once that is done. It must not raise. Output: the request's `Outcome`. Never
    raises for transport/HTTP/stream problems; only `asyncio.CancelledError` propagates (the
    connection is closed first), after `on_cancel` was given what the request measured until
    then (error `interrupted`) when it had been sent. An answer past its bounds
    (`token_budget`, `byte_budget`, `MAX_LINE_BYTES`) is cut as an `overrun`; one that sends
    nothing for `endpoint.idle_timeout_s` after its first token is cut as `idle`."""
    state = _Stream(clock, req.abort_after, req.max_tokens)
    try:
        request = request or build(endpoint, req)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, TypeError, ValueError) as exc:
        state.t0 = clock()
        state.fail("connect", f"cannot build the request: {_describe(exc)}")
        return state.outcome(endpoint, req.id, wallclock(), state.t0)
    sent = request.extensions.get("wl_sent")  # written already (the transport's `send_now`)
    elapsed = clock() - sent[1] if sent is not None and sent[0] is clock else 0.0
    try:
        with _IdleWatch(state, endpoint.idle_timeout_s):
            cut = await within(max(0.0, req.deadline_s - elapsed),
                               _exchange(client, request, state, wallclock, then))
    except asyncio.CancelledError:
        if not state.idle_cut:
            if on_cancel is not None and state.t0:
                state.fail("interrupted", "the run was stopped while the request was in flight",
                           state.status)
                on_cancel(state.outcome(endpoint, req.id, state.t0_unix, state.t_end or clock()))
            raise
        cut = False
    if state.idle_cut and not state.done:
        state.fail("idle", f"no token for {endpoint.idle_timeout_s:g}s after the first "
                   "(--idle-timeout); the request was cut", state.status)
    elif cut and not state.done:  # after [DONE] only the body's end was left
        state.fail("timeout", f"the run's time budget ran out {req.deadline_s:g}s after the send "
                   "(--time-budget)" if req.budget_cut else
                   f"total deadline of {req.deadline_s:g}s exceeded", state.status)
    elif then is not None and (state.answered or _answered(state)):
        hold = state.hold if state.answered else then(_answer(state))
        if hold is not None:
            await hold
    return state.outcome(endpoint, req.id, state.t0_unix, state.t_end or clock())


class _IdleWatch:
    """Cuts the request (cancels its task, `state.idle_cut` set) when its answer has sent
    nothing for `seconds` after its first token. One timer per request, looking every quarter
    of `seconds` whether chunks came since: nothing on the path of each chunk but a counter."""

    def __init__(self, state: _Stream, seconds: float | None) -> None:
        self.state, self.seconds = state, seconds
        self.task = asyncio.current_task()
        self.timer: asyncio.TimerHandle | None = None
        self.seen, self.quiet_since = -1, 0.0

    def __enter__(self) -> "_IdleWatch":
        if self.seconds is not None and self.task is not None:
            self.timer = asyncio.get_running_loop().call_later(self.seconds / 4, self._look)
        return self

    def _look(self) -> None:
        loop, state = asyncio.get_running_loop(), self.state
        now = loop.time()
        if state.ttft is None or state.n_chunks != self.seen:
            self.seen, self.quiet_since = state.n_chunks, now
        elif now - self.quiet_since >= self.seconds:
            state.idle_cut = True
            self.timer = None
            self.task.cancel()  # type: ignore[union-attr]
            return
        self.timer = loop.call_later(self.seconds / 4, self._look)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.state.idle_cut and kind is asyncio.CancelledError:
            if hasattr(self.task, "uncancel"):  # Python 3.11+: the task is not being cancelled
                self.task.uncancel()  # type: ignore[union-attr]


def _answered(state: _Stream) -> bool:
    """Output: True when the answer was read to its end without error or abort."""
    return state.done and state.error is None and not state.aborted


def _answer(state: _Stream) -> Answer:
    """Output: the `Answer` of a stream read to its end (its content joined once)."""
    content = _join(state.content)
    state.content = [content]
    return Answer(content, _join(state.reasoning), state.completion)


def _take_reads(state: _Stream, stamps: Any, then: Callable[[Answer], Any] | None) -> bool:
    """Transport callback (`ResponseStream.on_read`), on the loop, after each read of an SSE
    body: parse what is queued, so the session's task is not woken for every chunk. At the
    body's end, when that is a clean answer and `then` is given: hand its connection back to
    the pool and call `then` now — the task would do this only once it gets its turn on the
    loop, behind every other task woken meanwhile; when an engine ends many answers together,
    that queue is the client's delay. Output: True when the task must be woken: the body
    ended, or a line said to stop (the task goes on from there)."""
    if not state.stopped:  # else the task parsed up to [DONE] and waits for the body's end
        for chunk in stamps.queued():
            if _feed_chunk(chunk, state, stamps):
                break
    if not stamps.ended():
        return state.stopped
    if then is not None and _answered(state):
        for _ in stamps.queued():  # after [DONE] only the body's end was left: drop the rest
            pass
        state.t_end = state.now()
        if stamps.hand_back():
            state.answered = True  # called once, even if it raises (then its task raises it)
            state.hold = then(_answer(state))
    return True


async def _open(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """Send; if the server closed the pooled connection before answering (it closed a keep-alive
    connection just as we reused it: llama-server does after a stream), nothing was processed,
    so retry once on a fresh connection. A garbled answer is not retried: it was processed."""
    try:
        return await dispatch(client, request)
    except httpx.RemoteProtocolError as exc:
        if not dropped_before_answer(exc):
            raise
        return await dispatch(client, request)


def dropped_before_answer(exc: httpx.RemoteProtocolError) -> bool:
    """Output: True when the server closed the connection before any byte of the answer (our
    transport's `ConnectionDropped`, or httpcore's message for the same case)."""
    return isinstance(exc, ConnectionDropped) or "without sending a response" in str(exc)


async def _exchange(client: httpx.AsyncClient, request: httpx.Request, state: _Stream,
                    wallclock: Callable[[], float],
                    then: Callable[[Answer], Any] | None = None) -> None:
    """Send the request and read the answer into `state` (with `then`, see `send`: called as
    the answer ends when the transport can tell, `_take_reads`); the response is always
    closed. The send time is stamped here, just before the request is handed to httpx (or it
    is the time the transport wrote it, for a request written by `send_now`)."""
    sent = request.extensions.get("wl_sent")  # written already by the transport's `send_now`
    if sent is not None and sent[0] is state.clock:
        state.t0, state.t0_unix = sent[1], sent[2]
    else:
        state.t0, state.t0_unix = state.clock(), wallclock()
    try:
        response = await _open(client, request)
    except httpx.TimeoutException as exc:
        state.fail("timeout", f"no response: {_describe(exc)}")
        return
    except httpx.TransportError as exc:
        state.fail("connect", f"cannot reach {request.url}: {_describe(exc)}")
        return
    try:
        await _read_response(response, state, then)
    except httpx.TimeoutException as exc:
        state.fail("timeout", f"read timed out: {_describe(exc)}", state.status)
    except httpx.TransportError as exc:
        state.fail("stream_cut", f"stream broke after {state.n_tokens} token events: {_describe(exc)}", state.status)
    finally:
        await response.aclose()


async def _read_response(response: httpx.Response, state: _Stream,
                         then: Callable[[Answer], Any] | None = None) -> None:
    """Dispatch on the response: HTTP error, plain JSON body (server ignored `stream`) or SSE.
    An SSE body read by our transport is parsed as it is read (`_take_reads`), and with `then`
    finished as its last byte is parsed; not one to be aborted: that one is read chunk by
    chunk by this task, which closes the connection at the planned token."""
    state.status = response.status_code
    if response.status_code >= 400:
        body = await _read_limited(response)
        state.fail(
            "http", f"HTTP {response.status_code}: {engine_message(body)}",
            response.status_code, excerpt(body),
        )
        return
    stamps = response.extensions.get("wl_stream")
    if stamps is not None and getattr(stamps, "clock", None) is not state.clock:
        stamps = None  # stamps on another clock than the injected one: not comparable
    chunks = _body(response, stamps)
    head = b""
    ctype = response.headers.get("content-type", "")
    if "json" in ctype and "event-stream" not in ctype:  # maybe the server ignored `stream`
        async for chunk in chunks:
            head += chunk
            if head.strip() or state.over_bytes(len(chunk), len(head)):
                break
        if state.error is not None and state.error.kind == "overrun":
            return
        if head.lstrip()[:1] in (b"{", b"["):
            body = await _read_json_whole(chunks, head, state)
            if body is not None:
                _read_json_body(body, state)
                state.check_abort_target()
            return
    if stamps is not None and state.abort_after is None:
        stamps.on_read(lambda: _take_reads(state, stamps, then))
    await _read_sse(chunks, state, head, stamps)
    if state.done and state.t_end is None:
        state.t_end = state.now()
        if stamps is None or not stamps.at_end():
            await _finish_body(chunks)
    state.end_of_stream()
    state.check_abort_target()


def _body(response: httpx.Response, stamps: Any) -> AsyncIterator[bytes]:
    """Output: the body's chunks: straight from our transport's stream when the body is not
    content-encoded (httpx's decoder and chunker layers cost ~15 us a chunk), else httpx's
    decoded `aiter_bytes`."""
    if stamps is not None and "content-encoding" not in response.headers:
        return stamps.__aiter__()
    return response.aiter_bytes()


async def _finish_body(chunks: AsyncIterator[bytes], limit: int = 64 * 1024) -> None:
    """After `[DONE]`: read the body's end (the chunked terminator) so that httpcore sees a
    complete response and keeps the connection for the next request; otherwise closing the
    response closes the connection and every request pays a new TCP connection. Bounded in time
    and bytes: a server that keeps streaming after `[DONE]` is simply disconnected, and one that
    breaks the connection after `[DONE]` does not make the finished request an error."""
    try:
        await within(_FINISH_BODY_S, _drain(chunks, limit))
    except httpx.HTTPError:  # the request is complete; a broken ending only loses the connection
        return


async def _drain(chunks: AsyncIterator[bytes], limit: int) -> None:
    read = 0
    async for chunk in chunks:
        read += len(chunk)
        if read > limit:
            return


async def _read_sse(chunks: AsyncIterator[bytes], state: _Stream, buf: bytes = b"",
                    stamps: Any = None) -> None:
    """Split the byte stream (after the already-read `buf`) into lines (\\n, \\r\\n or \\r) and
    feed them; stop early on a stop condition (the caller then closes the connection). `stamps`
    (the transport's `ResponseStream`, when on the same clock) gives each chunk's arrival time."""
    if buf:
        lines = buf.splitlines()
        buf = b"" if buf[-1] in (10, 13) else lines.pop()
        for line in lines:
            if state.feed_line(line):
                state.stopped = True
                return
    state.buf = buf
    try:
        async for chunk in chunks:
            if state.stopped or _feed_chunk(chunk, state, stamps):
                return
    except httpx.TransportError:
        if not state.stopped:
            raise
        # `_take_reads` parsed up to a stop and the connection broke after it, before this task
        # resumed: what broke is only the body's end, as for `_finish_body`
    if state.stopped:  # `_take_reads` parsed up to a stop (the answer's end)
        return
    if state.buf:
        state.feed_line(state.buf)


def _feed_chunk(chunk: bytes, state: _Stream, stamps: Any) -> bool:
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
        if first and state.ttft is not None:
            first = False
            _check_first_read(state, stamps.doubt, bool(buf) or any(
                later.startswith(b"data:") for later in lines[i + 1:]))
        if stop:
            state.stopped = True
            return True
    if stamps is not None and state.ttft_content is not None and not state.looped:
        state.looped = True
        stamps.read_on_loop()  # both first-token times are in: the end needs no more
    return False


def _check_first_read(state: _Stream, doubt: float, more: bool) -> None:
    """Input: how much earlier than its stamp the read holding the first token may have begun
    (the transport's `doubt`: 0 when the kernel counted one packet for it) and whether that read
    held more of the stream after the first token's event (`more`). The stamp is the newest
    packet's: with more after the first token (later tokens, the end), the first one may have
    come up to `doubt` earlier than its stamp says (`ttft_late_s`); without, it was in the newest
    packet and its stamp is its own."""
    if more and doubt > _LATE_READ_S:
        state.ttft_late = doubt


async def _read_json_whole(chunks: AsyncIterator[bytes], head: bytes,
                           state: _Stream) -> bytes | None:
    """Output: a non-streamed JSON body read to its end (its chunks joined once), or None when
    it is past the answer's byte bound (an `overrun` is recorded; the rest is not read)."""
    parts = [head]
    async for chunk in chunks:
        if state.over_bytes(len(chunk), 0):
            return None
        parts.append(chunk)
    return b"".join(parts)


def _read_json_body(body: bytes, state: _Stream) -> None:
    """A non-streamed answer: take message text and usage from the body (no TTFT is invented)."""
    try:
        obj = _loads(body)
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


async def _read_limited(response: httpx.Response, limit: int = _ERROR_BODY_LIMIT) -> bytes:
    """Output: at most about `limit` bytes of the body (an error page can be huge)."""
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return data


def _describe(exc: BaseException) -> str:
    """Output: `ExceptionType: message` on one line (httpx messages can be empty)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
