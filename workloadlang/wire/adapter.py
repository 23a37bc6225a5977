"""The https path (and any httpx client, e.g. a test's `httpx.MockTransport`): the same
`Response` as the wire pool's, through httpx's public API.

Input: an `httpx.AsyncClient` and `Outgoing` requests. Output: `Response`s without stamps
(`stamps` None): a chunk's time is when the event loop read it. httpx's errors are raised as
the wire client's own (`workloadlang.wire.exceptions`), so the chat client handles one set.

A keep-alive connection that the server closed just as it was reused is told apart through
httpcore's public `trace` request extension: when no new connection was opened for the request
and the server's answer failed before its head, the error is `ConnectionDropped` (the chat
client sends such a request once more). A garbled head on a reused connection looks the same
and is sent once more too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from workloadlang.wire import exceptions
from workloadlang.wire.request import Outgoing
from workloadlang.wire.response import Headers, Stamps

_TIMEOUTS: dict[type[httpx.TransportError], type[exceptions.WireError]] = {
    httpx.ConnectTimeout: exceptions.ConnectTimeout, httpx.WriteTimeout: exceptions.WriteTimeout,
    httpx.ReadTimeout: exceptions.ReadTimeout, httpx.PoolTimeout: exceptions.ConnectTimeout,
}


def wire_error(exc: httpx.TransportError, *, dropped: bool = False) -> exceptions.WireError:
    """Output: the wire client's error for httpx's `exc` (`dropped`: see the module)."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    for kind, ours in _TIMEOUTS.items():
        if isinstance(exc, kind):
            return ours(text)
    if isinstance(exc, httpx.ReadError):
        return exceptions.ReadError(text)
    if isinstance(exc, httpx.WriteError):
        return exceptions.WriteError(text)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.LocalProtocolError)):
        return exceptions.ConnectionDropped(text) if dropped else exceptions.ProtocolError(text)
    return exceptions.ConnectError(text)  # ConnectError, UnsupportedProtocol, ProxyError, ...


class HttpxResponse:
    """An httpx response as a wire `Response` (no stamps)."""

    stamps: Stamps | None = None

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = Headers(list(response.headers.raw))

    async def body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.TransportError as exc:
            raise wire_error(exc) from None

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    """Sends `Outgoing` requests with an httpx client (`client.send(..., stream=True)`): only
    the request's own headers; redirects and auth as the client is set up (the runner's client
    follows none and has none)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def open(self, out: Outgoing) -> HttpxResponse:
        """Output: the response with its body still streaming. Raises a `WireError`."""
        events: list[str] = []

        async def trace(name: str, info: Any) -> None:
            events.append(name)

        # made here, not by `client.build_request`: none of the client's default headers
        # (`Accept-Encoding` would ask the engine to compress the stream), no cookies
        request = httpx.Request(
            out.method, out.url, headers=_headers(out.head),
            content=b"".join(out.body) if out.body is not None else None,
            extensions={"timeout": httpx.Timeout(out.timeout).as_dict(), "trace": trace})
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TransportError as exc:
            opened = any(e.startswith("connection.connect_tcp") for e in events)
            raise wire_error(exc, dropped=not opened and _before_head(events)) from None
        return HttpxResponse(response)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> HttpxTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _before_head(events: list[str]) -> bool:
    """Output: True when the trace shows the answer failed before its head was in."""
    return "http11.receive_response_headers.failed" in events or not any(
        e.startswith("http11.receive_response_headers") for e in events)


def _headers(head: bytes) -> list[tuple[str, str]]:
    """Output: the header lines of a request head (`request_head`), Host left to httpx."""
    out = []
    for line in head.split(b"\r\n")[1:]:
        if not line:
            continue
        name, _, value = line.partition(b": ")
        if name.lower() != b"host":
            out.append((name.decode("ascii"), value.decode("ascii")))
    return out
