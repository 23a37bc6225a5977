"""Side calls: the engine's discovery, tokenizer and counters, off the measurement's connections.

Input: a method, a URL, headers, a body, a timeout and the most bytes to read. Output: the
answer's status and body, or a `SideError` (`timeout`, `connect`, `dropped`: a reused
connection the server had closed before answering, so the call may be made again; `protocol`),
or `AnswerTooLarge` past the cap (the rest is not read).

- `WireSide`: a wire `Pool` of its own for a plain http:// engine, read on the event loop
  (no kernel stamps: nothing here is timed). A call takes a connection from its own idle stack
  in O(1): it neither scans nor takes the connections the run's requests go through.
- `HttpxSide`: an `httpx.AsyncClient` (an https:// engine with a client of its own, or a
  test's `httpx.MockTransport`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol

import httpx

from workloadlang.wire import (
    ConnectError,
    ConnectionDropped,
    Outgoing,
    Pool,
    WireError,
    WireTimeout,
)
from workloadlang.wire.request import USER_AGENT

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The most of an answer to /models, /props, /tokenize or /metrics that is read (a /tokenize
of a long prompt lists its tokens: about 8 bytes each): beyond it the answer is refused."""

SideErrorKind = Literal["timeout", "connect", "dropped", "protocol"]


class SideError(Exception):
    """A side call that got no answer: `kind` says how (see the module), `name` the type of
    the client's own error (`ConnectError`, `ReadTimeout`, ...)."""

    def __init__(self, kind: SideErrorKind, message: str, name: str) -> None:
        super().__init__(message)
        self.kind: SideErrorKind = kind
        self.name = name


class AnswerTooLarge(Exception):
    """An answer past `MAX_ANSWER_BYTES` (or the cap given): not read further."""


class Side(Protocol):
    """What makes side calls (see the module)."""

    async def call(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                   timeout: float | None, cap: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
        """Output: the answer's status and body. Raises `SideError`, `AnswerTooLarge`."""

    async def aclose(self) -> None:
        """Close its connections."""


async def call_again_if_dropped(side: Side, method: str, url: str, headers: dict[str, str],
                                body: bytes | None, timeout: float | None,
                                cap: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
    """`side.call`, made once more on a fresh connection when a reused one had been closed by
    the server (keep-alive expiry): these calls are idempotent."""
    try:
        return await side.call(method, url, headers, body, timeout, cap)
    except SideError as e:
        if e.kind != "dropped":
            raise
        return await side.call(method, url, headers, body, timeout, cap)


def side_of(client: Side | httpx.AsyncClient) -> Side:
    """Output: `client` as a `Side` (an httpx client is wrapped in `HttpxSide`)."""
    return HttpxSide(client) if isinstance(client, httpx.AsyncClient) else client


class WireSide:
    """Side calls over a wire pool of their own (see the module)."""

    def __init__(self, keepalive_expiry: float = 1.0) -> None:
        self.pool = Pool(stamped=False, keepalive_expiry=keepalive_expiry)
        self.calls = 0

    async def call(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                   timeout: float | None, cap: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
        self.calls += 1
        out = Outgoing(method, url, list(headers.items()),
                       None if body is None else [body], timeout)
        try:
            response = await self.pool.open(out)
            try:
                return response.status, await _capped(response.body(), cap)
            finally:
                await response.aclose()
        except WireTimeout as e:
            raise failed("timeout", e, timeout) from None
        except ConnectionDropped as e:
            raise failed("dropped", e, timeout) from None
        except ConnectError as e:
            raise failed("connect", e, timeout) from None
        except WireError as e:
            raise failed("protocol", e, timeout) from None

    async def aclose(self) -> None:
        await self.pool.aclose()


class HttpxSide:
    """Side calls through an httpx client (see the module). Only the call's own headers go out
    (plus Host, Content-Length and `User-Agent: workloadlang/VERSION` unless given): none of
    the client's defaults, so no `Accept-Encoding` asks the engine to compress its answer."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.calls = 0

    async def call(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                   timeout: float | None, cap: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
        self.calls += 1
        request = httpx.Request(method, url, headers={"User-Agent": USER_AGENT, **headers},
                                content=body,
                                extensions={"timeout": httpx.Timeout(timeout).as_dict()})
        try:
            response = await self.client.send(request, stream=True)
            try:
                return response.status_code, await _capped(response.aiter_bytes(), cap)
            finally:
                await response.aclose()
        except httpx.TimeoutException as e:
            raise failed("timeout", e, timeout) from None
        except httpx.RemoteProtocolError as e:
            raise failed("dropped", e, timeout) from None
        except httpx.HTTPError as e:
            raise failed("connect", e, timeout) from None

    async def aclose(self) -> None:
        await self.client.aclose()


def failed(kind: SideErrorKind, e: Exception, timeout: float | None) -> SideError:
    """Output: the `SideError` of a client error `e`: its message one line, a timeout's
    naming the time allowed."""
    name = type(e).__name__
    if kind == "timeout":
        return SideError(kind, f"timed out after {timeout or 0:g}s ({name})", name)
    return SideError(kind, f"{name}: {e}".rstrip(": "), name)


async def _capped(chunks: AsyncIterator[bytes], cap: int) -> bytes:
    """Output: the chunks joined. Raises `AnswerTooLarge` past `cap` bytes (the rest is not
    read)."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise AnswerTooLarge(f"the answer is over {cap:,} bytes")
        parts.append(chunk)
    return b"".join(parts)
