"""The start of a run against a REAL loopback server (tests/faultserver.py): connections opened
before the clock, every session's first request written in one go at the start (each holding a
concurrency slot), the answers read by the sessions, later requests on the same connections; a
request larger than the socket buffer written partly at once and finished by the transport."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from faultserver import FaultServer
from workloadlang import api
from workloadlang.plan.realise import ExactSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run.ahead import WriteAhead
from workloadlang.run.client import send
from workloadlang.run.endpoint import ChatRequest, Endpoint, outgoing
from workloadlang.run.executor import Executor
from workloadlang.wire import Outgoing, Pool, StartWrites

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

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

    def counted(self: StartWrites, out: Outgoing) -> bool:
        written.append(write(self, out))
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
        async with Pool() as pool:
            endpoint = Endpoint(base_url=fault_server.base_url, model="m")
            run = await Executor(plan, Realiser(plan, ExactSizer(count)), WriteAhead(pool),
                                 endpoint, ListSink()).run()
            return run.records, pool.connects

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
    big = "word " * 400_000  # ~2 MB: with a small send buffer the socket takes only part of it
    wire = ChatRequest(id="big", messages=[{"role": "user", "content": big}], max_tokens=2,
                       headers={"X-WL-Request": "big", "X-Tokens": "2"})
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[bool, Any]:
        async with Pool() as pool:
            request = outgoing(endpoint, wire)
            await pool.preconnect(endpoint.chat_url, 1, 5.0)
            # a fixed small send buffer (no autotuning): one non-blocking send cannot take it all
            origin = request.target.origin
            conn = pool.idle_connection(origin)
            assert conn is not None
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            pool.release(origin, conn)
            done = pool.write_now(request)
            rest = len(request.rest) if done else None
            out = await send(pool, endpoint, wire, out=request)
            return done, (rest, out)

    done, (rest, out) = asyncio.run(go())
    assert done and rest > 0
    assert out.error is None and out.content
    seen = next(r for r in fault_server.requests if r.get("id") == "big")
    assert seen["body"]["messages"][0]["content"] == big


def test_nothing_is_written_without_an_idle_connection(fault_server: FaultServer) -> None:
    wire = ChatRequest(id="cold", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[bool, Any]:
        async with Pool() as pool:
            request = outgoing(endpoint, wire)
            done = pool.write_now(request)
            return done, await send(pool, endpoint, wire, out=request)

    done, out = asyncio.run(go())
    assert not done and out.error is None  # sent the usual way


def _wire(i: int, **headers: str) -> ChatRequest:
    return ChatRequest(id=f"w{i}", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                       headers={"X-WL-Request": f"w{i}", **headers})


def test_start_writes_claim_idle_connections_and_give_back_the_unused(
        fault_server: FaultServer) -> None:
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")

    async def go() -> tuple[int, int, int, bool, int]:
        async with Pool() as pool:
            request = outgoing(endpoint, _wire(0))
            origin = request.target.origin
            await pool.preconnect(endpoint.chat_url, 3, 5.0)
            writes = pool.claim(endpoint.chat_url, 2)
            claimed, left = len(writes.conns), len(pool._idle[origin])
            wrote = writes.write(request)
            writes.begin_reading()
            writes.close()  # the claimed one not written on goes back
            back = len(pool._idle[origin])
            out = await send(pool, endpoint, _wire(0), out=request)
            assert out.error is None and out.content
            return claimed, left, back, wrote, pool.connects

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
        async with Pool() as pool:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            await pool.preconnect(url, 2, 5.0)
            accepted = [listener.accept()[0] for _ in range(2)]
            accepted[0].close()  # the server closes one of the two
            await asyncio.sleep(0.05)
            writes = pool.claim(url, 2)
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
        async with Pool() as pool:
            await pool.preconnect(endpoint.chat_url, 1, 5.0)
            request = outgoing(endpoint, wire)
            writes = pool.claim(endpoint.chat_url, 1)
            assert writes.write(request)
            await asyncio.sleep(0.3)  # the first token is in the socket, nobody reads it
            writes.begin_reading()
            return await send(pool, endpoint, wire, out=request)

    out = asyncio.run(go())
    assert out.error is None and out.content
    assert out.ttft_s is not None and out.ttft_s < 0.2, out.ttft_s
