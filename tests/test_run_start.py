"""The start of a run against a REAL loopback server (tests/faultserver.py): connections opened
before the clock, every session's first request written in one go at the start (each holding a
concurrency slot), the answers read by the sessions, later requests on the same connections; a
request larger than the socket buffer written partly at once and finished by the transport."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from faultserver import FaultServer, fault_server  # noqa: F401  (fixture)
from workloadlang import api
from workloadlang.plan.realise import ExactSizer, Realiser
from workloadlang.run.client import Endpoint, WireRequest, build, send
from workloadlang.run.executor import Executor, ListSink
from workloadlang.run.transport import (StartWrites, make_client, ready_to_write, send_now,
                                        wire_transport)

WORKLOAD = """
workload start {
  concurrency = 3
  session s repeat 4 {
    repeat 2 label step { fresh { user filler 40; reply 3 } }
  }
}
"""


def test_first_requests_are_written_at_once_on_connections_opened_before(
        fault_server: FaultServer, monkeypatch) -> None:
    fault_server.defaults = {"x-tokens": "3", "x-interval-ms": "20"}
    source = api.Source(name="start.wl", text=WORKLOAD)
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="t",
                         env={"max_context": 65536})
    written: list[bool] = []
    events: list[str] = []
    write, begin = StartWrites.write, StartWrites.begin_reading

    def counted(self: StartWrites, request: httpx.Request) -> bool:
        written.append(write(self, request))
        events.append("write")
        return written[-1]

    def reading(self: StartWrites) -> None:
        events.append(f"read {len(self.written)}")
        begin(self)

    monkeypatch.setattr(StartWrites, "write", counted)
    monkeypatch.setattr(StartWrites, "begin_reading", reading)

    async def count(text: str) -> int:
        return len(text.split())

    async def go() -> tuple[list[Any], int]:
        async with make_client() as client:
            endpoint = Endpoint(base_url=fault_server.base_url, model="m")
            run = await Executor(plan, Realiser(plan, ExactSizer(count)), client, endpoint,
                                 ListSink()).run()
            return run.records, wire_transport(client, httpx.URL(endpoint.chat_url)).connects

    records, connects = asyncio.run(go())
    assert [r.error for r in records] == [None] * 8
    assert written == [True] * 3  # the concurrency limit: the fourth waits for a slot
    assert events == ["write"] * 3 + ["read 3"]  # the answers are read after the last write
    assert connects == 3  # no more than the first requests needed: every later one reused one
    chats = [r for r in fault_server.requests if r["path"] == "/v1/chat/completions"]
    firsts = {r.id for r in plan.requests if r.id.endswith("/0")}
    assert len({c["peer"] for c in chats}) == 3
    assert fault_server.max_inflight <= 3
    early = [r for r in records if r.id in firsts]
    assert len(early) == 4 and all(r.ttft_s and r.t_send_unix for r in early)


def test_a_request_larger_than_the_socket_buffer_is_finished_by_the_transport(
        fault_server: FaultServer) -> None:
    big = "word " * 2_000_000  # ~10 MB: the socket takes only part of it at once
    wire = WireRequest(id="big", messages=[{"role": "user", "content": big}], max_tokens=2,
                       headers={"X-WL-Request": "big", "X-Tokens": "2"})
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[bool, Any]:
        async with make_client() as client:
            request = build(endpoint, wire)
            assert ready_to_write(client, request)
            transport = wire_transport(client, request.url)
            await transport.preconnect((request.url.host, request.url.port), 1, 5.0)
            done = send_now(client, request)
            rest = len(request.extensions["wl_conn"][1]) if done else None
            out = await send(client, endpoint, wire, request=request)
            return done, (rest, out)

    done, (rest, out) = asyncio.run(go())
    assert done and rest > 0
    assert out.error is None and out.content
    seen = next(r for r in fault_server.requests if r.get("id") == "big")
    assert seen["body"]["messages"][0]["content"] == big


def test_nothing_is_written_without_an_idle_connection(fault_server: FaultServer) -> None:
    wire = WireRequest(id="cold", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[bool, Any]:
        async with make_client() as client:
            request = build(endpoint, wire)
            assert ready_to_write(client, request)
            done = send_now(client, request)
            return done, await send(client, endpoint, wire, request=request)

    done, out = asyncio.run(go())
    assert not done and out.error is None  # sent the usual way


def _wire(i: int, **headers: str) -> WireRequest:
    return WireRequest(id=f"w{i}", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                       headers={"X-WL-Request": f"w{i}", **headers})


def test_start_writes_claim_idle_connections_and_give_back_the_unused(
        fault_server: FaultServer) -> None:
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[int, int, int, bool, int]:
        async with make_client() as client:
            url = httpx.URL(endpoint.chat_url)
            transport = wire_transport(client, url)
            origin = (url.host, url.port)
            await transport.preconnect(origin, 3, 5.0)
            writes = StartWrites.claim(client, endpoint.chat_url, 2)
            claimed, left = len(writes.conns), len(transport._idle[origin])
            request = build(endpoint, _wire(0))
            assert ready_to_write(client, request)
            wrote = writes.write(request)
            writes.begin_reading()
            writes.close()  # the claimed one not written on goes back
            back = len(transport._idle[origin])
            out = await send(client, endpoint, _wire(0), request=request)
            assert out.error is None and out.content
            return claimed, left, back, wrote, transport.connects

    claimed, left, back, wrote, connects = asyncio.run(go())
    assert (claimed, left, wrote) == (2, 1, True)
    assert back == 2 and connects == 3  # the unused claim is idle again; nothing new opened


def test_start_writes_skip_a_connection_the_server_closed() -> None:
    """`claim` checks liveness before the clock: a connection whose server went away is not
    claimed (the start's loop then makes no such check)."""
    import socket as socketlib

    listener = socketlib.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def go() -> int:
        async with make_client() as client:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            transport = wire_transport(client, httpx.URL(url))
            await transport.preconnect(("127.0.0.1", port), 2, 5.0)
            accepted = [listener.accept()[0] for _ in range(2)]
            accepted[0].close()  # the server closes one of the two
            await asyncio.sleep(0.05)
            writes = StartWrites.claim(client, url, 2)
            n = len(writes.conns)
            writes.close()
            accepted[1].close()
            return n

    try:
        assert asyncio.run(go()) == 1
    finally:
        listener.close()


def test_an_answer_read_after_the_start_keeps_its_arrival_stamp(
        fault_server: FaultServer) -> None:
    """The start reads its answers only after its last write: the first token's stamp is still
    when it arrived (the kernel's), not when it was read."""
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")
    wire = _wire(1, **{"X-Fault": "slow", "X-Tokens": "3", "X-Interval-Ms": "400"})

    async def go() -> Any:
        async with make_client() as client:
            url = httpx.URL(endpoint.chat_url)
            await wire_transport(client, url).preconnect((url.host, url.port), 1, 5.0)
            request = build(endpoint, wire)
            assert ready_to_write(client, request)
            writes = StartWrites.claim(client, endpoint.chat_url, 1)
            assert writes.write(request)
            await asyncio.sleep(0.3)  # the first token is in the socket, nobody reads it
            writes.begin_reading()
            return await send(client, endpoint, wire, request=request)

    out = asyncio.run(go())
    assert out.error is None and out.content
    assert out.ttft_s is not None and out.ttft_s < 0.2, out.ttft_s
