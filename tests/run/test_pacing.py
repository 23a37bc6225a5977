"""The latency pacing (`run.ahead.WriteAhead`): requests made ahead of their turn, a session's
next request written the moment its answer ends (`_chain`), before anything else is done with
that answer — the bytes it is written with (the body from messages encoded once, the head made
once), when it may be and when it may not, the sessions held meanwhile (`_hold` / `_release`) —
work no send waits for deferred to quiet moments, and, against a real loopback server, that
what the server receives is what the plan and the answers make."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from faultserver import FaultServer
from runexec import answer, execute
from workloadlang import api
from workloadlang.plan.realise import RatioSizer, Realiser
from workloadlang.results import ListSink
from workloadlang.run import ahead as ahead_module
from workloadlang.run.ahead import Made, WriteAhead
from workloadlang.run.client import send
from workloadlang.run.endpoint import (
    ChatRequest,
    Endpoint,
    body_parts,
    build_body,
    encode_body,
    head_of,
    outgoing,
)
from workloadlang.run.executor import Executor, chainable
from workloadlang.run.pacing import InTurn
from workloadlang.run.sse import Answer
from workloadlang.wire import HttpxTransport, Outgoing, Pool, content_length
from workloadlang.wire.request import rest_after

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

GROWING = """
workload grow {
  params { n: int = 3 }
  session s repeat $n { repeat 3 label step { user filler 30; reply 4 replay } }
}
"""


def plan_of(text: str, **params: str) -> Any:
    source = api.Source(name="t.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt="c",
                         env={"max_context": 65536})


# ------------------------------------------------------------------ the bytes


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "h\u00e9 \"x\""}]


@pytest.mark.parametrize("messages", [[], MESSAGES[:1], MESSAGES])
def test_the_body_is_the_dict_encoding_and_encoded_messages_go_in_as_they_are(
        messages: list[dict[str, Any]]) -> None:
    endpoint = Endpoint(base_url="http://e/v1", model="m")
    plain = ChatRequest(id="a", messages=messages, max_tokens=7,
                        options={"temperature": 0.5, "seed": None, "top_k": 3})
    expected = orjson.dumps(build_body(endpoint, plain))
    assert encode_body(endpoint, plain) == expected
    encoded = plain.model_copy(update={"messages": [orjson.dumps(m) for m in messages]})
    assert encode_body(endpoint, encoded) == expected
    assert b"".join(body_parts(endpoint, encoded)) == expected
    assert json.loads(expected)["messages"] == messages


def test_the_head_made_ahead_is_the_one_the_request_is_written_with() -> None:
    endpoint = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-1")
    wire = ChatRequest(id="a", messages=MESSAGES, max_tokens=3,
                       headers={"X-WL-Session": "s#0", "X-WL-Request": "a"})
    body = encode_body(endpoint, wire)
    written = b"".join(outgoing(endpoint, wire).payload())
    assert head_of(endpoint, wire) + content_length(len(body)) + body == written
    assert written.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"
                              b"User-Agent: workloadlang/")
    assert b"\r\nAuthorization: Bearer sk-1\r\n" in written
    assert b"\r\nX-WL-Session: s#0\r\nX-WL-Request: a\r\n" in written
    assert written.endswith(b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def test_what_is_left_after_a_partial_write_of_parts() -> None:
    parts = [b"ab", b"", b"cde", b"f"]
    for sent in range(7):
        assert rest_after(parts, sent) == b"abcdef"[sent:]


def test_a_request_in_more_pieces_than_one_system_call_takes_is_written_whole() -> None:
    """Over 512 pieces (a conversation of hundreds of turns) the pieces are joined first:
    `sendmsg` refuses more than IOV_MAX of them."""
    received: list[bytes] = []

    def serve(conn: Any) -> None:
        data = b""
        while len(data) < 6000:
            more = conn.recv(65536)
            if not more:
                break
            data += more
        received.append(data)

    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    url = "http://127.0.0.1:%d/v1/chat/completions" % listener.getsockname()[1]
    server = threading.Thread(target=lambda: serve(listener.accept()[0]), daemon=True)
    server.start()
    pieces = [b"%03d" % (i % 1000) for i in range(2000)]  # 6000 bytes in 2000 pieces

    async def go() -> Any:
        async with Pool() as pool:
            assert await pool.preconnect(url, 1) == 1
            out = Outgoing("POST", url, [], pieces)
            return pool.write_now(out), out

    written, out = asyncio.run(go())
    server.join(5)
    listener.close()
    assert written and out.rest == b""
    assert received == [b"".join(out.payload())] and received[0].endswith(b"".join(pieces))


def test_a_write_that_fails_other_than_by_the_socket_closes_the_connection_it_took() -> None:
    """An exception other than OSError from the write (here: a piece that is not bytes) goes to
    the caller, and the idle connection it took is closed, not left out of the pool open."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    url = "http://127.0.0.1:%d/v1/chat/completions" % listener.getsockname()[1]

    async def go() -> Any:
        async with Pool() as pool:
            assert await pool.preconnect(url, 1) == 1
            conn = pool._idle[("127.0.0.1", listener.getsockname()[1])][-1]  # noqa: SLF001
            with pytest.raises(TypeError):
                pool.write_now(Outgoing("POST", url, [], [b"body", "not bytes"]))  # type: ignore[list-item]
            return conn

    conn = asyncio.run(go())
    listener.close()
    assert conn.closed


def test_the_realiser_encodes_each_final_message_once() -> None:
    plan = plan_of(GROWING, n="1")
    realiser = Realiser(plan, RatioSizer(1.0))
    encodes: list[bytes] = []

    def encode(m: dict[str, Any]) -> bytes:
        encodes.append(orjson.dumps(m))
        return encodes[-1]

    first, second, third = plan.requests
    replies: dict[str, Any] = {}
    assert realiser.encoded(first, replies, encode) == encodes == [orjson.dumps(m) for m in
                                                                   realiser.messages(first, {})]
    # the second request's reply is not in yet: that message comes as a dict, not kept
    waiting = realiser.encoded(second, replies, encode)
    assert [type(m) for m in waiting].count(dict) == 1
    replies[first.id] = Answer("four tokens of text", "", 4)
    n = len(encodes)
    out = realiser.encoded(second, replies, encode)
    assert all(type(m) is bytes for m in out)
    assert [json.loads(m) for m in out] == realiser.messages(second, replies)
    assert len(encodes) == n + 1  # only the reply's message: the rest were encoded before
    replies[second.id] = Answer("more", "", 1)
    realiser.encoded(third, replies, encode)
    assert len(encodes) == n + 3  # the second reply and the third user turn


def test_the_messages_encoded_once_are_kept_at_their_own_size() -> None:
    """orjson's output keeps the buffer it was written into (a 3 KB message held 32 KB): the
    executor keeps each message's encoding in a bytes object of its own size."""
    import tracemalloc

    plan = plan_of('workload big { session s repeat 20 { user filler 2000; reply 4 } }')
    ex = executor_for(plan)
    realiser = ex.maker.realiser
    for req in plan.requests:
        realiser.messages(req, {})  # the text first: only the encodings are measured below
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for req in plan.requests:
            ex.maker.chat(req, {})
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(len(b) for b in realiser._encoded.values())
    grown = sum(d.size_diff for d in after.compare_to(before, "filename"))
    assert kept > 20 * 8000  # 20 messages of ~2000 words
    assert grown < 1.5 * kept


# ------------------------------------------------------------------ when


MIXED = """
workload mixed {
  concurrency = 4
  session s {
    turn a { user "a"; reply 4 }
    turn b { user "b"; reply 4 replay }
    turn c { user "c"; reply 8 abort after 2 }
    wait 1s
    turn d { user "d"; reply 4 }
    phase p { turn e { user "e"; reply 4 } }
  }
}
"""


def executor_for(plan: Any, pacing: Any = None, **options: Any) -> Executor:
    pacing = pacing or InTurn(HttpxTransport(httpx.AsyncClient()))
    return Executor(plan, Realiser(plan, RatioSizer(1.0)), pacing,
                    Endpoint(base_url="http://e/v1", model="m"), ListSink(), **options)


def chained(ex: Executor, req: Any, after: Any) -> Any:
    """Output: the request chained after `req` in `ex` (`executor.chainable`), or None."""
    return chainable(req, after, ex.waiting, ex.stops.decides(req), ex.phases.index)


def test_only_a_next_request_due_at_once_and_decided_by_nothing_is_chained() -> None:
    """The core says which next request is due the moment an answer ends; of those the latency
    pacing writes ahead only one without a planned abort (its session may be held before
    reading its answer, and an abort is exact only when read at once): end to end, b alone."""
    plan = plan_of(MIXED)
    ex = executor_for(plan)
    by = {r.id.split("/")[-2]: r for r in plan.requests}
    assert chained(ex, by["a"], by["b"]) is by["b"]
    assert chained(ex, by["a"], None) is None
    assert chained(ex, by["b"], by["c"]) is by["c"]  # due at once, but planned to abort
    assert chained(ex, by["c"], by["d"]) is None  # a planned wait (the settle time)
    assert chained(ex, by["d"], by["e"]) is None  # a phase barrier
    took: list[str] = []
    real = Executor.took_over

    def spy(self: Executor, req: Any) -> None:
        took.append(req.id)
        real(self, req)

    quick = plan.model_copy(update={"requests": tuple(  # without the 1 s wait
        r.model_copy(update={"wait_before": 0.0}) for r in plan.requests)})
    Executor.took_over = spy  # type: ignore[method-assign]
    try:
        run, _ = execute(quick, tokens(8))
    finally:
        Executor.took_over = real  # type: ignore[method-assign]
    assert [r.error for r in run.records] == [None] * 5
    assert took == [by["b"].id]


def tokens(n: int) -> Any:
    """A chat handler streaming `n` token events, usage and [DONE]."""
    events = b"".join(b'data: {"choices":[{"delta":{"content":"t%d "}}]}\n\n' % i
                      for i in range(n))
    tail = (b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d}}\n\n'
            b"data: [DONE]\n\n" % n)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=events + tail,
                              headers={"content-type": "text/event-stream"})

    return handler
    until = plan_of('workload u { session s { for i in 0..3 until miss { user "a"; reply 4 } } }')
    r0, r1 = until.requests[:2]
    assert chained(executor_for(until), r0, r1) is None  # its record may stop the loop
    fast = plan_of('workload f { fail_fast = true; session s { repeat 2 { user "a"; reply 4 } } }')
    assert chained(executor_for(fast), *fast.requests[:2]) is None


class FakePool:
    """What `WriteAhead` reads of a pool to hold sessions: `ended`, the answers read to their
    end so far (`each_read`: one more every time it is read)."""

    def __init__(self, each_read: bool = False) -> None:
        self.n, self.each_read = 0, each_read

    @property
    def ended(self) -> int:
        self.n += self.each_read
        return self.n


def test_held_sessions_go_on_one_a_loop_turn_once_no_answer_ends() -> None:
    pool = FakePool()
    ex = WriteAhead(pool)  # type: ignore[arg-type]

    async def go() -> list[list[bool]]:
        held = [ex._hold() for _ in range(3)]
        seen = []
        for turn in range(6):
            if turn < 2:
                pool.n += 1  # answers end in the first two turns: their sessions go first
            await asyncio.sleep(0)
            seen.append([f.done() for f in held])
        return seen

    seen = asyncio.run(go())
    assert seen[:2] == [[False] * 3] * 2
    assert seen[-1] == [True] * 3
    # then one a turn, oldest first
    counts = [sum(s) for s in seen]
    assert all(b - a <= 1 for a, b in zip(counts, counts[1:]))
    assert all(s == sorted(s, reverse=True) for s in seen)


def test_a_held_session_goes_on_after_the_longest_hold_even_while_answers_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead_module, "_HOLD_MAX_S", 0.02)
    ex = WriteAhead(FakePool(each_read=True))  # type: ignore[arg-type]  # an answer ends every turn

    async def go() -> tuple[bool, bool]:
        held = ex._hold()
        await asyncio.sleep(0.005)
        early = held.done()
        await asyncio.wait_for(held, 1.0)
        return early, held.done()

    assert asyncio.run(go()) == (False, True)


# ------------------------------------------------------------------ send's part


SSE = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
       b'data: {"choices":[{"delta":{"content":" there"}}]}\n\n'
       b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
       b"data: [DONE]\n\n")


def mock_send(handler: Any, wire: ChatRequest, then: Any = None,
              out: Outgoing | None = None, clock: Any = None) -> Any:
    async def go() -> Any:
        async with HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(handler))) as t:
            kw = {"clock": clock} if clock else {}
            return await send(t, Endpoint(base_url="http://e/v1", model="m"), wire,
                              out=out, then=then, **kw)

    return asyncio.run(go())


def sse_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})


def test_then_gets_the_clean_answer_and_the_outcome_waits_for_what_it_returns() -> None:
    order: list[Any] = []

    def then(answer: Answer) -> Any:
        order.append(answer)
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, lambda: (order.append("released"),
                                                             fut.set_result(None)))
        return fut

    wire = ChatRequest(id="r", messages=MESSAGES, max_tokens=2)
    outcome = mock_send(sse_answer, wire, then)
    assert order == [Answer("hi there", "", 2), "released"]
    assert outcome.content == "hi there" and outcome.error is None


@pytest.mark.parametrize("handler, abort", [
    (lambda r: httpx.Response(500, content=b'{"error":{"message":"boom"}}'), None),
    (sse_answer, 1),  # aborted after one token: not an answer read to its end
])
def test_then_is_not_called_for_an_error_or_an_abort(handler: Any, abort: int | None) -> None:
    calls: list[Answer] = []
    wire = ChatRequest(id="r", messages=MESSAGES, max_tokens=2, abort_after=abort)
    outcome = mock_send(handler, wire, lambda a: calls.append(a))
    assert calls == [] and (outcome.error is not None or outcome.aborted)


def test_a_request_written_ahead_keeps_its_total_deadline() -> None:
    """The deadline counts from when the request was written (`Outgoing.sent_at`), not from
    when its session gets to reading the answer (a held session, `_hold`)."""
    import time

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.3)
        return sse_answer(request)

    endpoint = Endpoint(base_url="http://e/v1", model="m")
    wire = ChatRequest(id="r", messages=MESSAGES, max_tokens=2, deadline_s=0.5)
    request = outgoing(endpoint, wire)
    clock = time.perf_counter
    request.sent_at, request.sent_unix, request.clock = clock() - 0.4, time.time() - 0.4, clock
    outcome = mock_send(slow, wire, out=request, clock=clock)
    assert outcome.error is not None and outcome.error.kind == "timeout"
    fresh = mock_send(slow, wire, clock=clock)  # the same request, written now: in time
    assert fresh.error is None


# ------------------------------------------------------------------ end to end


def run_against(server: FaultServer, plan: Any, pacing_class: type = WriteAhead) -> Executor:
    async def go() -> Executor:
        async with Pool() as pool:
            ex = Executor(plan, Realiser(plan, RatioSizer(1.0)), pacing_class(pool),
                          Endpoint(base_url=server.base_url, model="m"), ListSink())
            await ex.run()
            return ex

    return asyncio.run(go())


def test_each_next_request_is_written_as_its_answer_ends_and_is_what_the_plan_makes(
        fault_server: FaultServer) -> None:  # noqa: F811
    fault_server.reset()
    fault_server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "5"}
    chained: list[str] = []

    class Spy(WriteAhead):
        def _chain(self, req: Any, after: Any, answer: Answer) -> bool:
            done = super()._chain(req, after, answer)
            if done:
                chained.append(after.id)
            return done

    plan = plan_of(GROWING, n="4")
    ex = run_against(fault_server, plan, Spy)
    records = [ex.records[r.id] for r in plan.requests]
    assert [r.error for r in records] == [None] * 12
    follow_ups = sorted(r.id for r in plan.requests if not r.id.endswith("/0"))
    assert sorted(chained) == follow_ups  # every session's second and third request
    received = {r["id"]: r for r in fault_server.chat_requests()}
    endpoint = Endpoint(base_url=fault_server.base_url, model="m")
    for req in plan.requests:
        messages = ex.maker.realiser.messages(req, ex.outcomes)  # with the answers it replays
        wire = ChatRequest(id=req.id, messages=messages, max_tokens=req.max_tokens,
                           options=req.options)
        assert received[req.id]["body"] == json.loads(encode_body(endpoint, wire)), req.id
        assert received[req.id]["headers"]["x-wl-session"] == req.session
    for rid in follow_ups:  # written after the answer before it ended, on its own clock
        before = rid[:-1] + str(int(rid[-1]) - 1)
        prev, this = ex.outcomes[before], ex.outcomes[rid]
        assert this.t_send >= prev.t_send + prev.e2e_s
        assert fault_server.spans[rid][0] > fault_server.spans[before][1]
    assert len(ex.health.delays) == 12 and min(ex.health.delays) >= 0
    assert ex.slots._value == ex.concurrency  # every slot handed on was given back
    assert not ex.pacing.held and not ex.pacing.made and not ex.holding


def test_a_request_not_written_whole_at_once_is_not_held(
        fault_server: FaultServer) -> None:  # noqa: F811
    """A body larger than the socket takes at once (a long context; here ~2 MB through a fixed
    4 KB send buffer): the rest goes out at its session's turn, so the session is not held —
    else the rest would wait for the answers ending meanwhile, and the TTFT, counted from the
    first byte, with it."""
    fault_server.reset()
    fault_server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "5"}
    seen: list[tuple[str, bool, bool]] = []  # (request, written whole, held)
    url = urlsplit(fault_server.base_url)
    origin = (url.hostname, url.port)

    class Spy(WriteAhead):
        def _chain(self, req: Any, after: Any, answer: Answer) -> bool:
            # the connection the next request goes on: a fixed small send buffer (no
            # autotuning), so one non-blocking send cannot take the whole body (with the
            # receiver's window autotuned to tens of MB, the kernel may otherwise take it all)
            conn = self.pool.idle_connection(origin)
            if conn is not None:
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                self.pool.release(origin, conn)
            done = super()._chain(req, after, answer)
            if done:
                seen.append((after.id, not self.made[after.id].out.rest, False))
            return done

        def _hold(self) -> Any:
            seen[-1] = seen[-1][:2] + (True,)
            return super()._hold()

    words = 400_000
    source = api.Source(name="t.wl", text=f"""workload big {{ session s {{
        repeat 2 label step {{ user filler {words}; reply 4 replay }} }} }}""")
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="c",
                         env={"max_context": 1 << 24})
    ex = run_against(fault_server, plan, Spy)
    assert [ex.records[r.id].error for r in plan.requests] == [None, None]
    assert len(seen) == 1
    rid, whole, held = seen[0]
    assert rid == plan.requests[1].id and not whole and not held
    received = {r["id"]: r for r in fault_server.chat_requests()}
    messages = ex.maker.realiser.messages(plan.requests[1], ex.outcomes)
    assert received[rid]["body"]["messages"] == messages  # the rest arrived, in order


def test_a_chained_requests_budget_deadline_counts_from_its_write_not_its_turn() -> None:
    """With a time budget, a request `_chain` wrote and whose session gets to it later (held)
    keeps what was left of the budget when it was written: made at its turn, its deadline —
    counted from the write — ended before the budget did, and the next request went out with
    nothing left."""
    now = [10.0]
    plan = plan_of(GROWING, n="1")
    pacing = WriteAhead(Pool())
    ex = executor_for(plan, pacing, clock=lambda: now[0], time_budget_s=1.0)
    ex.maker.t0 = 10.0
    req = plan.requests[1]
    chat = ex.maker.chat(req, {plan.requests[0].id: Answer("a", "", 1)})
    out = Outgoing("POST", "http://e/v1/chat/completions", [], [b"{}"])
    out.sent_at, out.clock = 10.6, ex.clock
    pacing.made[req.id] = Made(chat, out)
    now[0] = 10.9  # its session's turn, 0.3 s after the write
    chat, _ = pacing._take(req)
    assert chat.budget_cut and abs(chat.deadline_s - 0.4) < 1e-9  # 1 s budget - 0.6 s at the write
    assert abs(ex.maker.deadline()["deadline_s"] - 0.1) < 1e-9  # one made now


HANDOVERS = """
workload handovers {
  params { n: int = 24; c: int = 3 }
  concurrency = $c
  timeout = 5s
  session s repeat $n { repeat 4 label step { user filler 20; reply 3 replay } }
}
"""


@pytest.mark.parametrize("limit", ["3", "7"])
def test_connections_handed_back_at_an_answers_end_and_taken_at_once_lose_no_wake(
        fault_server: FaultServer, limit: str) -> None:  # noqa: F811
    """Many sessions on few concurrency slots: answers end while other sessions wait for a
    slot, so a connection handed back in the read of an answer's last byte is taken at once
    by another session's task, often before the first reader has resumed. No request may
    lose the wake of its answer. A stress guard for that kind of bug (a resumed reader that
    cleared the next response's wait made it fail in about 1 of 3 runs); the deterministic
    case is tests/run/test_wire.py's `..._taken_by_a_task_already_queued_...`."""
    fault_server.reset()
    fault_server.defaults = {"x-fault": "slow", "x-tokens": "3", "x-interval-ms": "2"}
    plan = plan_of(HANDOVERS, c=limit)
    ex = run_against(fault_server, plan)
    outcomes = [ex.outcomes[r.id] for r in plan.requests]
    assert [o.error for o in outcomes] == [None] * 96
    assert max(o.e2e_s for o in outcomes) < 2.0  # none waited out its deadline
    assert ex.slots._value == ex.concurrency


# ------------------------------------------------------------------ made ahead, deferred work


EARLY = """
workload early {
  session s repeat 2 {
    turn a { user filler 50; reply 4 }
    spawn 1 cold label sub { user filler 50; reply 4 }
    turn finalize { user filler 50; reply 4 }
  }
}
"""

SIZING = """
workload sizing {
  session s repeat 2 {
    repeat 3 label step { fresh { user filler 300; reply 4 } }
  }
}
"""


def test_requests_are_made_before_their_turn_when_their_messages_are_final(monkeypatch) -> None:
    """Realising and encoding happen ahead of the send when nothing they need is missing: every
    session's first request before the clock starts, the finalize (which carries turn a's reply,
    not the sub-agent's) while the sub-agent is in flight. The early body is the final one."""
    plan = plan_of(EARLY)
    log: list[tuple[str, str]] = []
    bodies: dict[str, dict[str, Any]] = {}
    real_outgoing = ahead_module.outgoing

    def made(endpoint: Endpoint, chat: Any, *args: Any, **kw: Any) -> Outgoing:
        log.append(("build", chat.id))
        return real_outgoing(endpoint, chat, *args, **kw)

    monkeypatch.setattr(ahead_module, "outgoing", made)

    async def chat(request: httpx.Request) -> httpx.Response:
        rid = request.headers["x-wl-request"]
        bodies[rid] = json.loads(request.content)
        log.append(("sent", rid))
        await asyncio.sleep(0.02)
        log.append(("answered", rid))
        return answer()

    records = execute(plan, chat)[0].records
    assert [r.error for r in records] == [None] * len(plan.requests)
    first_send = next(i for i, (kind, _) in enumerate(log) if kind == "sent")
    firsts = [plan_req.id for plan_req in plan.requests if plan_req.label == "a"]
    assert len(firsts) == 2
    assert {rid for kind, rid in log[:first_send] if kind == "build"} == set(firsts)
    for final in (r for r in plan.requests if r.label == "finalize"):
        sub = next(r for r in plan.requests if r.session == final.session and r.label == "sub")
        assert log.index(("build", final.id)) < log.index(("answered", sub.id))
        assert log.count(("build", final.id)) == 1
        messages = bodies[final.id]["messages"]
        assert {"role": "assistant", "content": "hi"} in messages  # turn a's reply, replayed


def _logging_run(monkeypatch: Any, plan: Any, chat: Any) -> list[tuple[str, str]]:
    """Run `plan`; output: ("sent", id) and ("record", id) in the order they happened."""
    from workloadlang.run import record as record_module

    log: list[tuple[str, str]] = []
    real = record_module.build_record

    def build_record(req: Any, *args: Any, **kw: Any) -> Any:
        log.append(("record", req.id))
        return real(req, *args, **kw)

    monkeypatch.setattr(record_module, "build_record", build_record)

    async def logged(request: httpx.Request) -> httpx.Response:
        log.append(("sent", request.headers["x-wl-request"]))
        return await chat(request)

    execute(plan, logged)
    return log


def test_a_record_is_built_after_the_sessions_next_send_unless_that_needs_it(monkeypatch) -> None:
    """Building a record waits until the session's next request is written; an errored answer's
    record is built at once (the errors-in-a-row stop reads it before the next send)."""
    plan = plan_of(SIZING.replace("repeat 2", "repeat 1"))
    ids = [r.id for r in plan.requests]

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.005)
        if request.headers["x-wl-request"] == ids[1]:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    assert log.index(("sent", ids[1])) < log.index(("record", ids[0]))  # ok: after the next send
    assert log.index(("record", ids[1])) < log.index(("sent", ids[2]))  # error: before it
    assert sorted(rid for kind, rid in log if kind == "record") == sorted(ids)


def test_defer_wait_waits_for_quiet_or_for_the_cap() -> None:
    from workloadlang.run.ahead import _DEFER_MAX_S, _QUIET_S, defer_wait

    assert defer_wait(10.0, last_answer=10.0, since=10.0) == _QUIET_S  # an answer just now
    assert defer_wait(10.0, last_answer=10.0 - _QUIET_S / 3, since=9.99) == \
        pytest.approx(_QUIET_S * 2 / 3)
    assert defer_wait(10.0, last_answer=10.0 - _QUIET_S, since=10.0) == 0.0  # quiet long enough
    assert defer_wait(10.0, last_answer=10.0, since=10.0 - _DEFER_MAX_S) == 0.0  # waited enough
    assert defer_wait(10.0, last_answer=10.0, since=10.0 - _DEFER_MAX_S + _QUIET_S / 2) == \
        pytest.approx(_QUIET_S / 2)  # the cap comes first


def test_a_burst_of_answers_sends_every_next_request_before_any_record(monkeypatch) -> None:
    """Eight sessions answered together, one every 2 ms (an engine ending a batch, written
    stream by stream): every session's next request is written before the loop builds any
    record of the burst (built on the loop's next pass, they would be in between)."""
    monkeypatch.setattr(ahead_module, "_QUIET_S", 0.2)  # robust on a slow machine: nor is
    monkeypatch.setattr(ahead_module, "_DEFER_MAX_S", 2.0)  # the cap reached in the burst
    plan = plan_of(SIZING.replace("repeat 2", "repeat 8").replace("repeat 3", "repeat 2"))
    gate: dict[str, Any] = {"n": 0, "open": None}

    async def chat(request: httpx.Request) -> httpx.Response:
        if gate["open"] is None:
            gate["open"] = asyncio.Event()
        gate["n"] += 1
        position = gate["n"]
        if gate["n"] == 8:  # all first requests are in: answer them together
            gate["open"].set()
        await gate["open"].wait()
        if position <= 8:
            await asyncio.sleep(0.002 * position)
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    firsts = {r.id for r in plan.requests if r.index == 0}
    seconds = {r.id for r in plan.requests if r.index == 1}
    last_second_sent = max(log.index(("sent", rid)) for rid in seconds)
    first_record = min(log.index(("record", rid)) for rid in firsts)
    assert last_second_sent < first_record


def test_records_are_built_within_the_cap_while_answers_keep_coming(monkeypatch) -> None:
    """Never quiet (an answer every few ms for the whole run): records are still built and
    written during the run, once deferred work waited `_DEFER_MAX_S`."""
    monkeypatch.setattr(ahead_module, "_QUIET_S", 60.0)
    monkeypatch.setattr(ahead_module, "_DEFER_MAX_S", 0.02)
    plan = plan_of(SIZING.replace("repeat 2", "repeat 1").replace("repeat 3", "repeat 30"))

    async def chat(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.004)
        return answer()

    log = _logging_run(monkeypatch, plan, chat)
    ids = [r.id for r in plan.requests]
    assert log.index(("record", ids[0])) < log.index(("sent", ids[-1]))


def test_deferred_work_yields_a_loop_turn_to_answers_just_ended(monkeypatch) -> None:
    """A deferred pass that finds responses read to their end since the last pass does no work
    and runs again after one loop turn (the sessions of those answers go first), even when its
    work is overdue; but never twice in a row: answers ending before every pass do not starve
    the work (one item a pass here: each takes longer than a slice)."""
    import time

    pool = FakePool()
    plan = plan_of(SIZING)
    first, second = plan.requests[0].id, plan.requests[1].id
    made: list[str] = []

    def prepare(req: Any) -> None:
        time.sleep(0.002)
        made.append(req.id)

    async def go() -> list[list[str]]:
        ex = WriteAhead(pool)  # type: ignore[arg-type]
        monkeypatch.setattr(ex, "prepare", prepare)
        ex.waiting = [plan.requests[0], plan.requests[1]]
        ex.due, ex.last_answer = True, -1e9  # quiet: the work is due
        seen = []
        for turn in range(4):
            pool.n += 1  # the pool read an answer's last byte before each pass
            if turn == 0:
                ex._deferred()
            else:
                await asyncio.sleep(0)  # one loop turn: the pass scheduled again runs
            seen.append(list(made))
        return seen

    assert asyncio.run(go()) == [[], [first], [first], [first, second]]
