"""Idempotent engine calls survive a pooled connection the server already closed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from workloadlang.run.discover import Tokenizer
from workloadlang.run.errors import EndpointError


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
