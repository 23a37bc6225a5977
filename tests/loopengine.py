"""An engine stub served on loopback by the test's own event loop, for the runner's real path (the
wire pool, requests written ahead) with handlers as short as `httpx.MockTransport`'s.

    async with LoopEngine(handler) as engine:      # engine.base_url: http://127.0.0.1:PORT/v1
        ...

`handler(request: httpx.Request) -> httpx.Response` (or a coroutine giving one) sees each request
as it came off the socket; the response's body (bytes, or an async iterator: streamed as it comes)
goes back chunked, on a keep-alive connection. The handler runs on the test's loop, so it can
wait on the test's events and sleep with asyncio.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

Handler = Callable[[httpx.Request], "httpx.Response | Awaitable[httpx.Response]"]


class LoopEngine:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.base_url = ""

    async def __aenter__(self) -> LoopEngine:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):  # the connections' readers end at EOF
            writer.close()
        await asyncio.sleep(0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                response = self.handler(request)
                if inspect.isawaitable(response):
                    response = await response
                await _write_response(writer, response)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.writers.discard(writer)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> httpx.Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [tuple(line.split(": ", 1)) for line in lines[1:] if line]
    length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
    body = await reader.readexactly(length) if length else b""
    host = next((v for k, v in headers if k.lower() == "host"), "engine")
    return httpx.Request(method, f"http://{host}{target}", headers=headers, content=body)


async def _write_response(writer: asyncio.StreamWriter, response: httpx.Response) -> None:
    head = [f"HTTP/1.1 {response.status_code} X"]
    head += [f"{k}: {v}" for k, v in response.headers.items()
             if k.lower() not in ("content-length", "transfer-encoding")]
    head.append("Transfer-Encoding: chunked")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    stream: Any = response.stream
    if hasattr(stream, "__aiter__"):
        async for part in stream:
            if part:
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
    else:
        body = b"".join(stream)
        if body:
            writer.write(b"%x\r\n%s\r\n" % (len(body), body))
    writer.write(b"0\r\n\r\n")
    await writer.drain()
