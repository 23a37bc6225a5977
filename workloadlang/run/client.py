"""The streaming chat client: one OpenAI-compatible `/chat/completions` exchange -> an `Outcome`.

`send(transport, endpoint, req)` posts a streamed chat request and returns what was measured
(`workloadlang.run.sse`): client-side TTFT (monotonic, from just before the request is written
to when the first token's bytes reached the socket, where the transport stamps them), the
streamed text, usage, the cached-token evidence with its source, the engine's timings and any
error. It never raises for transport, HTTP or stream problems — they become `Outcome.error` with
everything measured so far kept. Only `asyncio.CancelledError` propagates, and the connection is
closed on the way out, so a request still in prefill can be cancelled.

The transport is the wire client's `Pool` (http://, stamps, requests written ahead) or an
`HttpxTransport` (https://, a test's mock); both raise only the wire client's errors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from workloadlang.run.endpoint import ChatRequest, Endpoint, outgoing
from workloadlang.run.errors import engine_message, excerpt
from workloadlang.run.sse import (
    Answer,
    Outcome,
    Stream,
    answer_of,
    feed_chunk,
    read_cleanly,
    read_json_body,
)
from workloadlang.wire import (
    ConnectionDropped,
    Outgoing,
    Response,
    Stamps,
    Transport,
    WireError,
    WireTimeout,
)

_ERROR_BODY_LIMIT = 64 * 1024
_FINISH_BODY_S = 1.0


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
    transport: Transport,
    endpoint: Endpoint,
    req: ChatRequest,
    *,
    out: Outgoing | None = None,
    clock: Callable[[], float] = time.perf_counter,
    wallclock: Callable[[], float] = time.time,
    then: Callable[[Answer], Awaitable[None] | None] | None = None,
    on_cancel: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Input: the transport (see the module), the endpoint, one request, optionally `out`, its
    bytes made ahead by `endpoint.outgoing` (maybe written already: its send time is then its
    write's), (for tests) the clocks, and `then`: called with the `Answer` once the answer was
    read to its end without error or abort and its connection is back in the pool, before
    anything else is done with it; when it returns an awaitable (it sent what comes next and
    asks to wait), the `Outcome` is made once that is done. It must not raise. Output: the
    request's `Outcome`. Never raises for transport/HTTP/stream problems; only
    `asyncio.CancelledError` propagates (the connection is closed first), after `on_cancel` was
    given what the request measured until then (error `interrupted`) when it had been sent. An
    answer past its bounds is cut as an `overrun`; one that sends nothing for
    `endpoint.idle_timeout_s` after its first token is cut as `idle`."""
    state = Stream(clock, req.abort_after, req.max_tokens)
    try:
        out = out or outgoing(endpoint, req)
    except (TypeError, ValueError) as exc:
        state.t0 = clock()
        state.fail("connect", f"cannot build the request: {_describe(exc)}")
        return state.outcome(endpoint, req.id, wallclock(), state.t0)
    sent = out.sent_on(clock)  # written already (`Pool.write_now`)
    elapsed = clock() - sent[0] if sent is not None else 0.0
    try:
        with _IdleWatch(state, endpoint.idle_timeout_s):
            cut = await within(max(0.0, req.deadline_s - elapsed),
                               _exchange(transport, out, state, wallclock, then))
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
    elif then is not None and (state.answered or read_cleanly(state)):
        hold = state.hold if state.answered else then(answer_of(state))
        if hold is not None:
            await hold
    return state.outcome(endpoint, req.id, state.t0_unix, state.t_end or clock())


class _IdleWatch:
    """Cuts the request (cancels its task, `state.idle_cut` set) when its answer has sent
    nothing for `seconds` after its first token. One timer per request, looking every quarter
    of `seconds` whether chunks came since: nothing on the path of each chunk but a counter."""

    def __init__(self, state: Stream, seconds: float | None) -> None:
        self.state, self.seconds = state, seconds
        self.task = asyncio.current_task()
        self.timer: asyncio.TimerHandle | None = None
        self.seen, self.quiet_since = -1, 0.0

    def __enter__(self) -> _IdleWatch:
        if self.seconds is not None and self.task is not None:
            self.timer = asyncio.get_running_loop().call_later(self.seconds / 4, self._look)
        return self

    def _look(self) -> None:
        loop, state = asyncio.get_running_loop(), self.state
        now = loop.time()
        if state.ttft is None or state.n_chunks != self.seen:
            self.seen, self.quiet_since = state.n_chunks, now
        elif self.seconds is not None and now - self.quiet_since >= self.seconds:
            state.idle_cut = True
            self.timer = None
            self.task.cancel()  # type: ignore[union-attr]
            return
        self.timer = loop.call_later((self.seconds or 0.0) / 4, self._look)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.state.idle_cut and kind is asyncio.CancelledError:
            if hasattr(self.task, "uncancel"):  # Python 3.11+: the task is not being cancelled
                self.task.uncancel()  # type: ignore[union-attr]



def take_reads(state: Stream, stamps: Stamps, then: Callable[[Answer], Any] | None) -> bool:
    """Read callback (`Stamps.on_read`), on the loop, after each read of an SSE
    body: parse what is queued, so the session's task is not woken for every chunk. At the
    body's end, when that is a clean answer and `then` is given: hand its connection back to
    the pool and call `then` now — the task would do this only once it gets its turn on the
    loop, behind every other task woken meanwhile; when an engine ends many answers together,
    that queue is the client's delay. Output: True when the task must be woken: the body
    ended, or a line said to stop (the task goes on from there)."""
    if not state.stopped:  # else the task parsed up to [DONE] and waits for the body's end
        for chunk in stamps.queued():
            if feed_chunk(chunk, state, stamps):
                break
    if not stamps.ended():
        return state.stopped
    if then is not None and read_cleanly(state):
        for _ in stamps.queued():  # after [DONE] only the body's end was left: drop the rest
            pass
        state.t_end = state.now()
        if stamps.hand_back():
            state.answered = True  # called once, even if it raises (then its task raises it)
            state.hold = then(answer_of(state))
    return True



async def _open(transport: Transport, out: Outgoing) -> Response:
    """Send; if the server closed the pooled connection before answering (it closed a keep-alive
    connection just as we reused it: llama-server does after a stream), nothing was processed,
    so send it once more, on another connection. A garbled answer is not sent again: it was
    processed."""
    try:
        return await transport.open(out)
    except ConnectionDropped:
        return await transport.open(out)


async def _exchange(transport: Transport, out: Outgoing, state: Stream,
                    wallclock: Callable[[], float],
                    then: Callable[[Answer], Any] | None = None) -> None:
    """Send the request and read the answer into `state` (with `then`, see `send`: called as
    the answer ends when the transport can tell, `take_reads`); the response is always
    closed. The send time is stamped here, just before the request is handed to the transport
    (or it is the time the pool wrote it, for a request written ahead)."""
    sent = out.sent_on(state.clock)
    if sent is not None:
        state.t0, state.t0_unix = sent
    else:
        state.t0, state.t0_unix = state.clock(), wallclock()
    try:
        response = await _open(transport, out)
    except WireTimeout as exc:
        state.fail("timeout", f"no response: {_describe(exc)}")
        return
    except WireError as exc:
        state.fail("connect", f"cannot reach {out.url}: {_describe(exc)}")
        return
    try:
        await _read_response(response, state, then)
    except WireTimeout as exc:
        state.fail("timeout", f"read timed out: {_describe(exc)}", state.status)
    except WireError as exc:
        state.fail("stream_cut", f"stream broke after {state.n_tokens} token events: {_describe(exc)}", state.status)
    finally:
        await response.aclose()


async def _read_response(response: Response, state: Stream,
                         then: Callable[[Answer], Any] | None = None) -> None:
    """Dispatch on the response: HTTP error, plain JSON body (server ignored `stream`) or SSE.
    An SSE body with stamps is parsed as it is read (`take_reads`), and with `then` finished as
    its last byte is parsed; not one to be aborted: that one is read chunk by chunk by this
    task, which closes the connection at the planned token."""
    state.status = response.status
    if response.status >= 400:
        body = await _read_limited(response)
        state.fail(
            "http", f"HTTP {response.status}: {engine_message(body)}",
            response.status, excerpt(body),
        )
        return
    stamps = response.stamps
    if stamps is not None and stamps.clock is not state.clock:
        stamps = None  # stamps on another clock than the injected one: not comparable
    chunks = response.body()
    head = b""
    ctype = response.headers.get("content-type")
    if "json" in ctype and "event-stream" not in ctype:  # maybe the server ignored `stream`
        async for chunk in chunks:
            head += chunk
            if head.strip() or state.over_bytes(len(chunk), len(head)):
                break
        if state.error is not None and state.error.kind == "overrun":
            return
        if head.lstrip()[:1] in (b"{", b"["):
            whole = await _read_json_whole(chunks, head, state)
            if whole is not None:
                read_json_body(whole, state)
                state.check_abort_target()
            return
    if stamps is not None and state.abort_after is None:
        stamps.on_read(lambda: take_reads(state, stamps, then))
    await _read_sse(chunks, state, head, stamps)
    if state.done and state.t_end is None:
        state.t_end = state.now()
        if stamps is None or not stamps.at_end():
            await _finish_body(chunks)
    state.end_of_stream()
    state.check_abort_target()


async def _finish_body(chunks: AsyncIterator[bytes], limit: int = 64 * 1024) -> None:
    """After `[DONE]`: read the body's end (the chunked terminator) so that the connection is
    kept for the next request; otherwise closing the response closes the connection and every
    request pays a new TCP connection. Bounded in time and bytes: a server that keeps streaming
    after `[DONE]` is simply disconnected, and one that breaks the connection after `[DONE]`
    does not make the finished request an error."""
    try:
        await within(_FINISH_BODY_S, _drain(chunks, limit))
    except WireError:  # the request is complete; a broken ending only loses the connection
        return


async def _drain(chunks: AsyncIterator[bytes], limit: int) -> None:
    read = 0
    async for chunk in chunks:
        read += len(chunk)
        if read > limit:
            return


async def _read_sse(chunks: AsyncIterator[bytes], state: Stream, buf: bytes = b"",
                    stamps: Stamps | None = None) -> None:
    """Split the byte stream (after the already-read `buf`) into lines (\\n, \\r\\n or \\r) and
    feed them; stop early on a stop condition (the caller then closes the connection). `stamps`
    (the response's `Stamps`, when on the same clock) gives each chunk's arrival time."""
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
            if state.stopped or feed_chunk(chunk, state, stamps):
                return
    except WireError:
        if not state.stopped:
            raise
        # `take_reads` parsed up to a stop and the connection broke after it, before this task
        # resumed: what broke is only the body's end, as for `_finish_body`
    if state.stopped:  # `take_reads` parsed up to a stop (the answer's end)
        return
    if state.buf:
        state.feed_line(state.buf)



async def _read_json_whole(chunks: AsyncIterator[bytes], head: bytes,
                           state: Stream) -> bytes | None:
    """Output: a non-streamed JSON body read to its end (its chunks joined once), or None when
    it is past the answer's byte bound (an `overrun` is recorded; the rest is not read)."""
    parts = [head]
    async for chunk in chunks:
        if state.over_bytes(len(chunk), 0):
            return None
        parts.append(chunk)
    return b"".join(parts)



async def _read_limited(response: Response, limit: int = _ERROR_BODY_LIMIT) -> bytes:
    """Output: at most about `limit` bytes of the body (an error page can be huge)."""
    data = b""
    async for chunk in response.body():
        data += chunk
        if len(data) >= limit:
            break
    return data


def _describe(exc: BaseException) -> str:
    """Output: `ExceptionType: message` on one line (the message can be empty)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
