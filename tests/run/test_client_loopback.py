"""The client against a REAL loopback server (tests/faultserver.py: starlette + uvicorn on
127.0.0.1): HTTP errors, refused connections, cuts, malformed chunks, stalls past the deadline,
lenient SSE, aborts that really close the connection, cancellation during prefill, discovery
errors."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest

from faultserver import FaultServer
from workloadlang.run.client import send
from workloadlang.run.discover import discover
from workloadlang.run.endpoint import ChatRequest, Endpoint
from workloadlang.run.errors import EndpointError
from workloadlang.run.sse import Outcome
from workloadlang.wire import HttpxTransport, Pool

pytestmark = pytest.mark.alone  # it reads time: nothing else of the suite in flight

MSGS = [{"role": "user", "content": "hello"}]
# the https path (httpx's own transport) and the wire pool (what wl run uses for http://)
CLIENTS = {"httpcore": lambda: HttpxTransport(httpx.AsyncClient()), "wire": Pool}
new_client = Pool


@pytest.fixture(autouse=True, params=sorted(CLIENTS))
def _client_kind(request: pytest.FixtureRequest):
    """Every test here runs over both transports."""
    global new_client
    new_client = CLIENTS[request.param]
    yield
    new_client = Pool


def request(rid: str, fault: str, **fields: Any) -> ChatRequest:
    headers = {"X-WL-Request": rid, "X-Fault": fault, **fields.pop("extra_headers", {})}
    return ChatRequest(id=rid, messages=MSGS, max_tokens=16, headers=headers, **fields)


def run(server: FaultServer, req: ChatRequest, **ep: Any) -> Outcome:
    endpoint = Endpoint(base_url=ep.pop("base_url", server.base_url), model="fault-model", **ep)

    async def go() -> Outcome:
        async with new_client() as client:
            return await send(client, endpoint, req)

    return asyncio.run(go())


def test_ok_stream(fault_server: FaultServer) -> None:
    out = run(fault_server, request("ok1", "ok", extra_headers={"X-Tokens": "4"}), api_key="sk-loop")
    assert out.error is None, out.error
    assert out.content == "t0 t1 t2 t3 " and out.streamed_tokens == 4
    assert (out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (100, 4, 60)
    assert out.server_prefill_ms == 12.5 and out.http_status == 200
    seen = next(r for r in fault_server.requests if r.get("id") == "ok1")
    assert seen["headers"]["authorization"] == "Bearer sk-loop"
    assert seen["body"]["stream"] is True and seen["body"]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("fault", "status", "text"), [("http500", 500, "CUDA out of memory"),
                                                        ("http429", 429, "too many requests")])
def test_http_errors_surface_the_engine_message(fault_server: FaultServer, fault: str, status: int, text: str) -> None:
    out = run(fault_server, request(f"{fault}-1", fault))
    assert out.error is not None and out.error.kind == "http"
    assert out.error.status == status and out.http_status == status
    assert text in out.error.message and text in (out.error.body or "")


def test_connection_refused() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    endpoint = Endpoint(base_url=f"http://127.0.0.1:{port}/v1", model="m")

    async def go() -> Outcome:
        async with new_client() as client:
            return await send(client, endpoint, ChatRequest(id="x", messages=MSGS, max_tokens=1, deadline_s=5))

    out = asyncio.run(go())
    assert out.error is not None and out.error.kind == "connect"
    assert f"127.0.0.1:{port}" in out.error.message
    assert out.http_status is None and out.ttft_s is None


def test_stream_cut_halfway_keeps_measured_tokens(fault_server: FaultServer) -> None:
    out = run(fault_server, request("cut1", "cut", extra_headers={"X-Tokens": "6"}))
    assert out.error is not None and out.error.kind == "stream_cut"
    assert out.content == "t0 t1 t2 " and out.streamed_tokens == 3
    assert out.ttft_s is not None and out.http_status == 200


def test_malformed_chunk_keeps_the_rest(fault_server: FaultServer) -> None:
    out = run(fault_server, request("mal1", "malformed", extra_headers={"X-Tokens": "3"}))
    assert out.error is not None and out.error.kind == "malformed"
    assert out.content == "t0 t1 t2 " and out.prompt_tokens == 100 and out.cached_tokens == 60


def test_engine_error_in_stream(fault_server: FaultServer) -> None:
    out = run(fault_server, request("eng1", "engine_error"))
    assert out.error is not None and out.error.kind == "engine"
    assert "KV cache exhausted" in out.error.message and out.streamed_tokens == 2


def test_stall_respects_the_total_deadline(fault_server: FaultServer) -> None:
    start = time.monotonic()
    out = run(fault_server, request("stall1", "stall", deadline_s=0.6))
    elapsed = time.monotonic() - start
    assert out.error is not None and out.error.kind == "timeout"
    assert "0.6s" in out.error.message
    assert out.content == "t0 " and out.ttft_s is not None
    assert 0.55 <= out.e2e_s < 1.2 and elapsed < 2.0
    assert fault_server.disconnected("stall1").wait(3)


@pytest.mark.parametrize("fault", ["nospace", "pings"])
def test_lenient_sse(fault_server: FaultServer, fault: str) -> None:
    out = run(fault_server, request(f"{fault}1", fault, extra_headers={"X-Tokens": "3"}))
    assert out.error is None, out.error
    assert out.content == "t0 t1 t2 " and out.finish_reason == "stop" and out.cached_tokens == 60


def test_abort_at_exactly_n_tokens_closes_the_connection(fault_server: FaultServer) -> None:
    headers = {"X-Tokens": "400", "X-Interval-Ms": "5"}
    out = run(fault_server, request("abort1", "slow", abort_after=7, extra_headers=headers))
    assert out.aborted and out.error is None
    assert out.streamed_tokens == 7 and out.content == "".join(f"t{i} " for i in range(7))
    assert out.e2e_s < 1.5
    assert fault_server.disconnected("abort1").wait(3), "server never saw the disconnect"
    assert fault_server.sent["abort1"] < 100


def test_cancel_during_prefill_closes_the_connection(fault_server: FaultServer) -> None:
    endpoint = Endpoint(base_url=fault_server.base_url, model="fault-model")

    async def go() -> None:
        async with new_client() as client:
            task = asyncio.create_task(send(client, endpoint, request("prefill1", "prefill")))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    assert fault_server.disconnected("prefill1").wait(3), "server never saw the cancelled request leave"


def test_models_error_raises_endpoint_error() -> None:
    with FaultServer() as server:
        server.models_status = 503
        server.models_body = {"error": {"message": "Loading model", "type": "unavailable_error"}}

        async def go() -> None:
            async with httpx.AsyncClient() as client:  # discovery goes through httpx
                await discover(client, server.base_url)

        with pytest.raises(EndpointError) as info:
            asyncio.run(go())
    assert info.value.kind == "http" and info.value.status == 503
    assert "HTTP 503" in str(info.value) and "Loading model" in str(info.value)
    assert "\n" not in str(info.value)
