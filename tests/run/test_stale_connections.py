"""Requests survive a pooled keep-alive connection the server closed just before reuse."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from workloadlang.run.client import send
from workloadlang.run.discover import Tokenizer
from workloadlang.run.endpoint import ChatRequest, Endpoint
from workloadlang.run.errors import EndpointError
from workloadlang.run.sse import Outcome
from workloadlang.wire import HttpxTransport


def tokenizer(fail_times: int) -> tuple[Tokenizer, list[int]]:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= fail_times:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json={"tokens": [1, 2, 3]})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return Tokenizer(client, "http://engine/tokenize", "content"), calls


def test_one_stale_connection_is_retried():
    tok, calls = tokenizer(fail_times=1)
    assert asyncio.run(tok.count("a b c")) == 3
    assert len(calls) == 2


def test_a_server_that_keeps_dropping_is_an_endpoint_error():
    tok, calls = tokenizer(fail_times=5)
    with pytest.raises(EndpointError):
        asyncio.run(tok.count("a b c"))
    assert len(calls) == 2


def chat(fail_times: int) -> tuple[Outcome, list[int]]:
    calls = []
    sse = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
           b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n'
           b"data: [DONE]\n\n")

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= fail_times:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, content=sse, headers={"content-type": "text/event-stream"})

    async def go() -> Outcome:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            ep = Endpoint(base_url="http://engine/v1", model="m")
            return await send(HttpxTransport(client), ep, ChatRequest(id="r", messages=[], max_tokens=1))

    return asyncio.run(go()), calls


def test_a_chat_request_on_a_just_closed_connection_is_sent_again():
    out, calls = chat(fail_times=1)
    assert out.error is None and out.content == "hi" and out.prompt_tokens == 5
    assert len(calls) == 2


def test_a_chat_request_the_server_keeps_dropping_is_a_connect_error():
    out, calls = chat(fail_times=5)
    assert out.error is not None and out.error.kind == "connect"
    assert len(calls) == 2


def test_the_engine_counters_survive_a_stale_connection():
    """The end-of-run /metrics read came on a pooled connection llama-server had closed: it
    was lost (no counters at the end, no cross-check). One retry, as for the other calls."""
    from workloadlang.run.metrics import scrape

    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, text="llamacpp:prompt_tokens_total 10\n"
                                         "llamacpp:prompt_tokens_cached_total 30\n")

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await scrape(client, "http://engine/metrics")

    counters = asyncio.run(go())
    assert counters is not None and counters.queries_tokens == 40 and len(calls) == 2


def test_a_side_call_on_a_connection_the_server_drops_is_made_again():
    """The side calls' own wire pool: the server answers a first call, then closes the kept
    connection when the second call comes on it (without answering): the call goes out again
    on a fresh connection, and nothing of the run's pool is touched."""
    from workloadlang.run.side import WireSide, call_again_if_dropped

    answered: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        while await reader.readuntil(b"\r\n\r\n"):
            if served == 1 and len(answered) == 1:  # the second call on a kept connection
                writer.close()
                return
            served += 1
            answered.append(1)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def go() -> tuple[list[tuple[int, bytes]], int, int]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        side = WireSide(keepalive_expiry=30)
        try:
            got = [await call_again_if_dropped(side, "GET", f"http://127.0.0.1:{port}/x", {},
                                               None, 5.0) for _ in range(2)]
            return got, side.calls, side.pool.connects
        finally:
            await side.aclose()
            server.close()

    got, calls, connects = asyncio.run(go())
    assert got == [(200, b"ok"), (200, b"ok")] and len(answered) == 2
    assert (calls, connects) == (3, 2)  # the second call made again, on a new connection
