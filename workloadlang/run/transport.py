"""The HTTP/1.1 transport under the runner's httpx client: lean, O(1) pooling, kernel arrival times.

`make_client()` builds the one pooled `httpx.AsyncClient` that `wl run` uses. Plain `http://`
goes through `WireTransport` (below); `https://` through httpx's own transport (httpcore).

Why not httpcore for `http://`: its connection pool re-scans every connection on every request
start and response close (quadratic in the pool size, encode/httpcore#1035) and each streamed
chunk passes ~6 async-generator layers and an anyio cancel scope; at 64 streams that made the
client, not the engine, the bottleneck (docs/performance.md "Client overhead"). aiohttp is faster
but its `ClientSession` does not expose the socket, and the httpx-aiohttp bridge maps a server
disconnect to `ConnectTimeout` (a wrong error kind, and it defeats the stale-connection retry).

What `WireTransport` does:
- one non-blocking socket per connection, responses parsed by `httptools` (llhttp, the parser
  uvicorn uses), an idle stack per origin (O(1) checkout), idle connections dropped after
  `keepalive_expiry` seconds or when the server has closed them;
- every read is stamped with the time the bytes reached the socket: on Linux a reader thread
  (`_Reader`, epoll, at the lowest scheduling priority) reads each socket as soon as bytes land
  and it gets a CPU, and takes the kernel's receive timestamp (`SO_TIMESTAMPNS`), converted to
  `clock` (monotonic) by its age; parsing stays on the event loop. A read that held more than
  one packet (counted by the kernel) carries its `doubt`: how much earlier than the stamp (the
  newest packet's) its first bytes may have come (`_Connection.doubt`). Once the caller has the
  first tokens (`ResponseStream.read_on_loop`) the rest of the response is read by the loop
  itself, still kernel-stamped (the newest packet's time, exact
  for the stream's end). Elsewhere (or with an injected clock) the loop reads and stamps `clock()`.
  `ResponseStream.arrival` is the stamp of the chunk just yielded, so TTFT does not grow when the
  client's event loop is busy with other streams;
- a caller may take each read as it is parsed, in the read callback (`ResponseStream.on_read`),
  instead of being woken for every chunk, and at the body's end give the connection back to
  the pool there (`hand_back`); the client's SSE reader does (`client._take_reads`);
- exceptions are httpx's: `ConnectError` / `ConnectTimeout`, `RemoteProtocolError` for a garbled
  response or a body cut short — its subclass `ConnectionDropped` when the server closed before
  any byte of the response (nothing was processed: the caller may retry), `ReadError`,
  `ReadTimeout`, `WriteError`. Not supported here (httpx's transport handles them for https):
  TLS, proxies, HTTP/2, `Expect: 100-continue`, upgrades.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import socket
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterator

import httptools
import httpx

from .. import __version__
from ..stamps import CMSG_SPACE as _CMSG_SPACE, SO_TIMESTAMPNS as _SO_TIMESTAMPNS
from ..stamps import arrival as _arrival
from ..stamps import data_segments as _data_segments
from ..stamps import enable as _enable_stamps

_READ_SIZE = 256 * 1024
_PAUSE_BYTES = 4 * 1024 * 1024  # stop reading a response whose consumer is this far behind
_MAX_PIECES = 512  # pieces written in one sendmsg (the kernel takes up to IOV_MAX, 1024 on Linux)
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows
_ROUND_S = 0.001  # the reader thread polls at least this often while it watches a socket


_USER_AGENT = f"workloadlang/{__version__}"


class ConnectionDropped(httpx.RemoteProtocolError):
    """The server closed the connection before sending any byte of the response (typically a
    keep-alive connection it closed just as it was reused): the request was not processed, so
    sending it again is safe."""


def make_client(keepalive_expiry: float = 1.0) -> httpx.AsyncClient:
    """Output: the runner's pooled client: `WireTransport` for http://, httpx's transport for
    https://, no client-wide timeout (each call sets its own). Pooled connections are dropped
    after `keepalive_expiry` s idle: servers close idle keep-alive connections (llama.cpp and
    uvicorn after 5 s) and a request sent on one the server just closed would fail."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1024,
                          keepalive_expiry=keepalive_expiry)
    https = LazyTransport(lambda: httpx.AsyncHTTPTransport(limits=limits))
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None), transport=https,
        mounts={"http://": WireTransport(keepalive_expiry=keepalive_expiry), "https://": https},
    )


class LazyTransport(httpx.AsyncBaseTransport):
    """A transport made by `make()` on its first request. httpx's own transport loads the
    system's CA certificates into an SSL context when it is made (~40 ms of CPU), which a run
    against an http:// engine never needs."""

    def __init__(self, make: Callable[[], httpx.AsyncBaseTransport]) -> None:
        self._make = make
        self.transport: httpx.AsyncBaseTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.transport is None:
            self.transport = self._make()
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        transport, self.transport = self.transport, None  # mounted twice: closed once
        if transport is not None:
            await transport.aclose()


@functools.lru_cache(maxsize=64)
def _parsed(url: str) -> httpx.URL:
    return httpx.URL(url)


def build_request(method: str, url: str, headers: dict[str, str], content: bytes | None,
                  timeout: float | None) -> httpx.Request:
    """Input: method, URL, the complete headers, the body and a deadline in seconds (None: no
    limit). Output: an httpx request carrying these headers (plus Host, Content-Length and a
    `User-Agent: workloadlang/VERSION` unless given): no client defaults, so no
    `Accept-Encoding` asks the engine to compress a stream. The URL and the timeouts are parsed
    once per distinct value (the headers are not cached: a chat request's carry its own id)."""
    return httpx.Request(method, _parsed(url), headers={"User-Agent": _USER_AGENT, **headers},
                         content=content, extensions={"timeout": _timeouts(timeout)})


@functools.lru_cache(maxsize=64)
def _timeouts(timeout: float | None) -> dict[str, float | None]:
    return httpx.Timeout(timeout).as_dict()  # read, never changed, by the transports


async def dispatch(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """Input: the runner's client and a request from `build_request`. Output: the response with
    its body still streaming (close it). Sends on the transport the client mounts for the URL
    (also a test's MockTransport or an https proxy) but skips the client's per-request layers —
    auth flow, redirects, cookie jar, event hooks, logging — which the runner does not use (it
    sets its own headers, follows no redirect, keeps no cookies) and which cost about as much
    CPU as the transport itself."""
    transport = client._transport_for_url(request.url)  # noqa: SLF001 (httpx >= 0.18)
    response = await transport.handle_async_request(request)
    response.request = request
    return response


async def open_connections(client: httpx.AsyncClient, url: str, n: int,
                           timeout: float = 5.0) -> int:
    """Input: the runner's client, a URL and a count. Output: how many idle connections to the
    URL's origin were opened (0 unless its transport is a `WireTransport`). Called before the
    clock starts, so that the requests sent at the start reuse them: connection set-up is then
    neither in their TTFT nor in the client's start burst. Failures are left to the requests."""
    found = _wire_origin(client, url)
    if found is None or n <= 0:
        return 0
    return await found[0].preconnect(found[1], n, timeout)


def wire_transport(client: httpx.AsyncClient, url: httpx.URL) -> "WireTransport | None":
    """Output: the client's transport for `url` when it is a `WireTransport`, else None."""
    transport = client._transport_for_url(url)  # noqa: SLF001
    return transport if isinstance(transport, WireTransport) else None


def _wire_origin(client: httpx.AsyncClient, url: httpx.URL | str
                 ) -> "tuple[WireTransport, tuple[str, int]] | None":
    """Output: the client's `WireTransport` for `url` and `url`'s origin (host, port), or None
    when its transport is another."""
    url = _parsed(url) if isinstance(url, str) else url
    transport = wire_transport(client, url)
    return None if transport is None else (transport, (url.host, url.port or 80))


def ready_to_write(client: httpx.AsyncClient, request: httpx.Request) -> bool:
    """Before the clock: serialise `request` for `send_now`. Output: False when its transport is
    not a `WireTransport` (then `send_now` never writes it)."""
    if wire_transport(client, request.url) is None:
        return False
    request.extensions["wl_payload"] = _serialise(request, request.content)
    return True


def send_now(client: httpx.AsyncClient, request: httpx.Request) -> bool:
    """Without awaiting: write a request prepared by `ready_to_write` on an idle connection.
    Output: True when written (`request.extensions["wl_sent"]` is `(clock, sent at, unix
    time)`; sending it as usual then only reads the answer); False when nothing was written
    (no idle live connection, or the socket took no byte): send it as usual."""
    payload = request.extensions.get("wl_payload")
    if payload is None or "wl_conn" in request.extensions:
        return False
    written = write_payload(client, request.url, [payload])
    if written is None:
        return False
    request.extensions.update(written)
    return True


def write_payload(client: httpx.AsyncClient, url: httpx.URL | str,
                  payload: list[bytes]) -> dict[str, Any] | None:
    """Without awaiting: write the bytes of a whole request, in pieces (`payload_head`,
    `content_length`, the body's parts: one system call, no copy joining them), on an idle
    connection to `url`'s origin, before its httpx request is made. Output:
    the extensions that make the httpx request of those bytes, made later, written (`wl_conn`,
    `wl_sent`: see `send_now`), or None when nothing was written (not a `WireTransport`, no
    idle live connection, the socket took no byte)."""
    found = _wire_origin(client, url)
    return None if found is None else found[0].write_now(found[1], payload)


class StartWrites:
    """The run's start: every session's first request written one after the other, the last of
    them delayed by all the writes before it, so each write does only what must happen then.
    `claim` (before the clock) takes idle connections from the pool, their liveness checked
    then; `write` writes one request prepared by `ready_to_write` on the next of them, without
    starting to read its answer; `begin_reading` (after the last write) starts reading every
    answer. Reading later changes no first-token stamp: a read's stamp is its newest packet's
    arrival as the kernel saw it, and a read of several packets says how much earlier its bytes
    may have come (`_Connection.doubt`). `close` gives back the connections not used."""

    def __init__(self, transport: "WireTransport", origin: tuple[str, int],
                 conns: list["_Connection"]) -> None:
        self.transport, self.origin, self.conns = transport, origin, conns
        self.written: list[_Connection] = []

    @classmethod
    def claim(cls, client: httpx.AsyncClient, url: str, n: int) -> "StartWrites | None":
        """Output: up to `n` idle live connections to `url`'s origin, taken from the pool (None
        when its transport is not a `WireTransport`: nothing is written ahead then)."""
        found = _wire_origin(client, url)
        if found is None:
            return None
        transport, origin = found
        conns = []
        while len(conns) < n and (conn := transport._idle_connection(origin)) is not None:
            conns.append(conn)
        conns.reverse()  # the most recently released first, as the pool hands them out
        return cls(transport, origin, conns)

    def write(self, request: httpx.Request) -> bool:
        """Output: True when `request` (see `send_now`) was written on a claimed connection."""
        payload = request.extensions.get("wl_payload")
        if payload is None or not self.conns or "wl_conn" in request.extensions:
            return False
        conn = self.conns.pop()
        written = self.transport.write_on(self.origin, conn, [payload], read=False)
        if written is None:
            return False
        self.written.append(conn)
        request.extensions.update(written)
        return True

    def begin_reading(self) -> None:
        """Start reading the answer of every request written (of the live connections)."""
        for conn in self.written:
            conn._start_reading()  # noqa: SLF001
        self.written = []

    def close(self) -> None:
        """Give the connections not used back to the pool."""
        for conn in self.conns:
            self.transport.release(self.origin, conn)
        self.conns = []


def _rest(parts: list[bytes], sent: int) -> bytes:
    """Output: what is left of `parts`, joined, after their first `sent` bytes."""
    for i, part in enumerate(parts):
        if sent < len(part):
            return b"".join([part[sent:], *parts[i + 1:]])
        sent -= len(part)
    return b""


def payload_head(request: httpx.Request) -> bytes:
    """Input: an httpx request with a non-empty body. Output: its serialised head up to its
    last header, `Content-Length` (which httpx puts last); `_serialise` of the same request
    with another body `B` is this + `content_length(len(B))` + B. Raises ValueError when the head
    does not end with the length (a request this transport would not write)."""
    whole = _serialise(request, b"")
    end = content_length(len(request.content))
    if not whole.endswith(b"\r\n" + end):
        raise ValueError("the request head does not end with its Content-Length")
    return whole[:-len(end)]


def content_length(size: int) -> bytes:
    """Output: the `Content-Length` header line of a body of `size` bytes and the head's end."""
    return b"Content-Length: %d\r\n\r\n" % size


class WireTransport(httpx.AsyncBaseTransport):
    """httpx transport for plain HTTP/1.1 (see the module docstring). `clock` is the monotonic
    clock that arrival times are expressed in (tests inject one)."""

    def __init__(self, keepalive_expiry: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._expiry = keepalive_expiry
        self.clock = clock
        self.connects = 0  # connections opened (tests and benches read it)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Input: an httpx request for an http:// URL. Output: the response with its body still
        streaming (`ResponseStream`); the connection returns to the pool when it is closed."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"WireTransport only speaks http://, not {request.url.scheme}://")
        timeouts = request.extensions.get("timeout") or {}
        origin = (request.url.host, request.url.port or 80)
        written = request.extensions.pop("wl_conn", None)
        if written is not None:  # `write_now` wrote it (or its beginning) already
            conn, rest = written
        else:
            rest = request.extensions.get("wl_payload") or _serialise(request, await request.aread())
            conn = await self._checkout(origin, timeouts.get("connect"))
        try:
            if rest:
                await conn.send(rest, timeouts.get("write"))
            head = await conn.read_head(request.method == "HEAD", timeouts.get("read"))
        except BaseException:
            conn.close()
            raise
        stream = ResponseStream(conn, self, origin, timeouts.get("read"))
        return httpx.Response(
            status_code=head.status, headers=head.headers, stream=stream, request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason,
                        "wl_stream": stream},
        )

    async def preconnect(self, origin: tuple[str, int], n: int, timeout: float) -> int:
        """Open connections to `origin` until `n` are idle; output: how many were opened."""
        missing = n - len(self._idle.get(origin, ()))
        opened = await asyncio.gather(*(_Connection.open(origin, timeout, self.clock)
                                        for _ in range(max(0, missing))), return_exceptions=True)
        conns = [c for c in opened if isinstance(c, _Connection)]
        self.connects += len(conns)
        for conn in conns:
            self.release(origin, conn)
        return len(conns)

    def write_now(self, origin: tuple[str, int], payload: list[bytes]) -> dict[str, Any] | None:
        """See `write_payload`. A partly written request keeps its connection and the rest in
        `wl_conn` for `handle_async_request`."""
        conn = self._idle_connection(origin)
        if conn is None:
            return None
        return self.write_on(origin, conn, payload)

    def write_on(self, origin: tuple[str, int], conn: "_Connection", payload: list[bytes],
                 read: bool = True) -> dict[str, Any] | None:
        """`write_now` on `conn`, an idle connection to `origin` taken from the pool. `read`:
        start reading its answer now; else the caller does (`StartWrites.begin_reading`).
        Output: as `write_now`'s (None: `conn` went back to the pool, or was closed)."""
        if len(payload) > 1 and (len(payload) > _MAX_PIECES or not _HAS_SENDMSG):
            payload = [b"".join(payload)]
        sent_at, unix = self.clock(), time.time()
        conn.mark_sent(sent_at)
        try:
            sent = conn.sock.sendmsg(payload) if len(payload) > 1 else conn.sock.send(payload[0])
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            conn.close()
            return None
        except BaseException:  # none is known to happen; the connection must not leak either way
            conn.close()
            raise
        if sent == 0:
            self.release(origin, conn)
            return None
        if read:
            conn._start_reading()  # noqa: SLF001
        rest = payload[0][sent:] if len(payload) == 1 else _rest(payload, sent)
        return {"wl_conn": (conn, rest), "wl_sent": (self.clock, sent_at, unix)}

    def _idle_connection(self, origin: tuple[str, int]) -> "_Connection | None":
        """Output: the most recently released live idle connection to `origin`, or None."""
        stack = self._idle.get(origin)
        now = self.clock()
        while stack:
            conn = stack.pop()
            if now - conn.released_at < self._expiry and conn.alive():
                conn.reused = True
                return conn
            conn.close()
        return None

    async def _checkout(self, origin: tuple[str, int], timeout: float | None) -> "_Connection":
        """Output: the most recently released live idle connection to `origin`, or a new one."""
        conn = self._idle_connection(origin)
        if conn is not None:
            return conn
        self.connects += 1
        return await _Connection.open(origin, timeout, self.clock)

    def release(self, origin: tuple[str, int], conn: "_Connection") -> None:
        """Give a connection whose response was read to its end back to the idle stack."""
        if conn.closed:
            return
        conn.released_at = self.clock()
        self._idle.setdefault(origin, []).append(conn)

    async def aclose(self) -> None:
        """Close every idle connection."""
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()


def _serialise(request: httpx.Request, body: bytes) -> bytes:
    """Input: an httpx request and its body (read whole). Output: the HTTP/1.1 request bytes
    (a streamed upload's `Transfer-Encoding: chunked` becomes a `Content-Length`)."""
    target = request.url.raw_path or b"/"
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    names = set()
    for name, value in request.headers.raw:
        if name.lower() == b"transfer-encoding":
            continue
        names.add(name.lower())
        lines.append(name + b": " + value)
    if body and b"content-length" not in names:
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class _Head:
    """A parsed status line and headers."""

    __slots__ = ("status", "reason", "headers")

    def __init__(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.reason, self.headers = status, reason, headers


class _Connection:
    """One HTTP/1.1 connection: a non-blocking socket read by the reader thread (kernel stamps) or
    a loop reader callback into an httptools parser (on the loop). Body bytes are queued with
    their arrival stamps; `next_chunk` awaits them."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float]) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.clock = clock
        self.parser: Any = None
        self.reused = False
        self.closed = False
        self.released_at = 0.0
        self.timer: asyncio.TimerHandle | None = None  # the read timeout (see `_wait`)
        self.wait_deadline = 0.0
        self.wait_timeout: float | None = None  # the wait in progress's (`_wait`)
        self._stamped = _SO_TIMESTAMPNS is not None and clock is time.perf_counter
        # reads the reader thread queued on the loop / of those, delivered (one writer each)
        self.thread_reads = self.thread_delivered = 0
        # what is known of the answer's packets not yet read (`doubt`): they came after `floor`
        # (clock), and the socket had `consumed` data packets before them (None: not known)
        self.floor = 0.0
        self.consumed: int | None = None
        self.drained = True  # the last read emptied the socket
        self.requests = 0  # requests written on this connection
        self.watched_at = float("inf")  # when the reader thread started watching the socket
        self.turn = -1
        self._reset()

    @classmethod
    async def open(cls, origin: tuple[str, int], timeout: float | None,
                   clock: Callable[[], float]) -> "_Connection":
        """Connect to `origin` (each resolved address in turn). Raises httpx.ConnectError /
        ConnectTimeout."""
        try:
            return await asyncio.wait_for(cls._connect(origin, clock), timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {origin[0]}:{origin[1]} timed out") from None

    @classmethod
    async def _connect(cls, origin: tuple[str, int], clock: Callable[[], float]) -> "_Connection":
        loop = asyncio.get_running_loop()
        host, port = origin
        infos = _ADDRESSES.get(origin) or _literal(host, port)
        if infos is None:
            try:  # a thread-pool call: done once per origin, not per connection
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from exc
            _ADDRESSES[origin] = infos
        last: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _enable_stamps(sock)
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            return cls(sock, clock)
        raise httpx.ConnectError(f"cannot connect to {host}:{port}: {last}")

    def _reset(self) -> None:
        """Prepare for the next response on this connection."""
        self._disarm()
        self.parser = httptools.HttpResponseParser(self)
        self.head: _Head | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.chunks: collections.deque[tuple[bytes, float, float]] = collections.deque()
        self.pieces: list[bytes] = []  # body pieces of the read being parsed
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None  # an httpx error, or what `on_read` raised
        self.waiter: asyncio.Future | None = None
        self.received_any = False
        self.head_only = False
        self.stamp = 0.0
        self.reading = False
        self.by_thread = False  # being read by the reader thread (else: on the loop)
        self.on_loop = False  # `read_on_loop` was called for this response
        self.on_read: Callable[[], bool] | None = None  # see `ResponseStream.on_read`
        self.interrupted = False  # it woke the reader before the body's end (`next_chunk`)
        self.turn += 1  # a response's reader stops when the turn moves on (`next_chunk`)

    # ---------------------------------------------------------------- socket side
    def alive(self) -> bool:
        """Output: False when the server has closed the idle connection (EOF or stray bytes)."""
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return False  # EOF (b"") or bytes nobody asked for: not reusable either way


    async def send(self, payload: bytes, timeout: float | None) -> None:
        """Write the whole request, then start reading. The first write is made at once, in the
        caller's task (a request usually fits the socket buffer: no loop round trip between the
        send stamp and the bytes leaving). A failure to write on a reused connection is the
        server having closed it: `ConnectionDropped` (the caller may retry)."""
        self.mark_sent(self.clock())
        try:
            try:
                sent = self.sock.send(payload)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(payload):
                await asyncio.wait_for(
                    self.loop.sock_sendall(self.sock, memoryview(payload)[sent:]), timeout)
        except asyncio.TimeoutError:
            raise httpx.WriteTimeout("sending the request timed out") from None
        except OSError as exc:
            if self.reused:
                raise ConnectionDropped(f"server closed the connection: {exc}") from exc
            raise httpx.WriteError(f"cannot send the request: {exc}") from exc
        self._start_reading()

    def mark_sent(self, now: float) -> None:
        """Just before a request is written (at `now`): nothing of its answer can have come yet.
        A connection's first request needs no system call for the count: nothing came before."""
        if self._stamped:
            self.floor = now
            self.consumed = _data_segments(self.sock) if self.requests else 0
            self.requests += 1
            self.drained = True

    def doubt(self, stamp: float, start: float, before: int | None, size: int,
              round_floor: float) -> float:
        """Input: a thread read's stamp (its newest packet's arrival), the clock just before the
        read, the socket's data packet count just before it (None: unknown), the bytes it gave,
        and the reader's last poll round start (the socket was seen empty then, if watched).
        Output: how much earlier than `stamp` the read's first bytes may have come — 0 when the
        kernel counted at most one data packet for it (then the stamp is exact for all of it),
        else back to the last moment nothing of them had come. Updates what is known for the
        next read."""
        after = _data_segments(self.sock) if before is not None else None
        packets = None if after is None or self.consumed is None else after - self.consumed
        known_empty = self.drained and self.watched_at <= round_floor
        floor = max(self.floor, round_floor) if known_empty else self.floor
        self.drained = size < _READ_SIZE
        if self.drained:  # what comes next came after `start`, and after `before` packets
            self.floor, self.consumed = start, before
        return 0.0 if packets is not None and packets <= 1 else max(0.0, stamp - floor)

    def _start_reading(self) -> None:
        if not self.reading and not self.closed:
            self.reading = True
            self.by_thread = self._stamped and not self.on_loop
            if self.by_thread:
                _reader().add(self)
            else:
                self.loop.add_reader(self.sock.fileno(), self._on_readable)

    def _stop_reading(self) -> None:
        if self.reading:
            self.reading = False
            if self.by_thread:
                _reader().remove(self)
            elif not self.closed:
                self.loop.remove_reader(self.sock.fileno())

    def read_on_loop(self) -> None:
        """For the rest of this response, read on the event loop instead of the reader thread.
        Each read is still stamped by the kernel, but bytes that queued up while the loop was
        busy come as one read stamped with the NEWEST packet's arrival: exact for the end of a
        stream, not for a first token (which is why the thread reads until then). Saves a
        thread hand-off per chunk and the thread's contention for the GIL."""
        if self.on_loop:
            return
        self.on_loop = True
        if self.reading and self.by_thread:
            # remove() returns once the thread's reads so far are queued on the loop, so they
            # are delivered before anything the loop reads from now on
            self._stop_reading()
            self._start_reading()

    def _on_readable(self) -> None:
        """Loop callback: read what the socket holds, stamped by the kernel (Linux) or on read."""
        try:
            if self._stamped:
                data, anc, _, _ = self.sock.recvmsg(_READ_SIZE, _CMSG_SPACE)
                stamp = _arrival(anc, self.clock)
            else:
                data, stamp = self.sock.recv(_READ_SIZE), self.clock()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.deliver(None, 0.0, exc)
            return
        # no doubt is worked out here: the loop reads a stamped socket only once the first
        # tokens are in (`read_on_loop`), and an unstamped one's stamp is the read's own time
        self.deliver(data, stamp, None)

    def deliver(self, data: bytes | None, stamp: float, exc: OSError | None,
                doubt: float = 0.0) -> None:
        """On the loop: what one socket read gave (bytes, b"" at EOF, or the read's error), when
        it arrived (its newest packet) and how much earlier its first bytes may have come
        (`doubt`, see `doubt`). Feeds the parser and wakes the consumer."""
        if self.closed and data:
            return  # read before the connection was closed: nobody is waiting for it
        if exc is not None:
            self._fail_read(exc)
            return
        if not data:
            self._eof()
            return
        self.stamp = stamp
        self.received_any = True
        pieces = self.pieces = []
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._set_error(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))
        finally:
            if pieces:  # the body bytes of one read are one chunk: they share its arrival
                body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                self.chunks.append((body, stamp, doubt))
                self.buffered += len(body)
        if self.buffered > _PAUSE_BYTES:
            self._stop_reading()
        if self.on_read is None or self.error is not None:
            self._wake()
            return
        waiter, turn = self.waiter, self.turn  # the hook may hand the connection on
        try:
            wake = self.on_read()
        except Exception as exc:  # noqa: BLE001 (a bug in the hook: raised by its reader)
            self._hook_failed(exc, waiter, turn)
            return
        if wake:
            if self.turn == turn:  # still this response's: did the hook stop before its end?
                self.interrupted = not self.complete
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif self.waiter is not None and self.wait_timeout is not None:
            self.wait_deadline = self.loop.time() + self.wait_timeout  # data came: still alive

    def _hook_failed(self, exc: Exception, waiter: asyncio.Future | None, turn: int) -> None:
        """The `on_read` hook raised (it must not): its reader raises the same exception from
        its wait, instead of waiting for a wake that will not come until its deadline; the
        connection, unless the hook handed it on first, is not used again."""
        if self.turn == turn:
            if self.error is None:
                self.error = exc  # raised as is by `next_chunk`
            self._stop_reading()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        elif self.turn != turn:  # nobody of that response waits: at least say so
            self.loop.call_exception_handler({"message": "a read hook raised", "exception": exc})

    def _fail_read(self, exc: OSError) -> None:
        if not self.received_any and self.reused:
            self._set_error(ConnectionDropped(f"server closed the connection: {exc}"))
        else:
            self._set_error(httpx.ReadError(f"reading the response failed: {exc}"))
        self._wake()

    def _eof(self) -> None:
        """The server closed the connection."""
        self._stop_reading()
        if self.complete:
            pass
        elif self.head is None:
            self._set_error(ConnectionDropped("Server disconnected without sending a response."))
        elif self._close_delimited():
            self.complete = True
        else:
            self._set_error(httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"))
        self.close_socket_only()
        self._wake()

    def _close_delimited(self) -> bool:
        names = {name.lower() for name, _ in self.head.headers} if self.head else set()
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _set_error(self, error: httpx.TransportError) -> None:
        if self.error is None:
            self.error = error
        self._stop_reading()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---------------------------------------------------------------- parser callbacks
    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim response: wait for the real one
            self.headers, self.reason = [], b""
            return
        self.head = _Head(status, self.reason, self.headers)
        if self.head_only:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        if self.head is not None:
            self.complete = True
            _ENDED[0] += 1
            self.keep_alive = bool(self.parser.should_keep_alive())  # only valid in this callback
            self._stop_reading()

    # ---------------------------------------------------------------- consumer side
    async def _wait(self, timeout: float | None) -> None:
        """Until `_wake`, or ReadTimeout when nothing arrives for `timeout` s. Not
        `asyncio.wait_for` (before Python 3.12 one more future and one more trip through the
        event loop per wait, i.e. per streamed chunk), and not a timer per wait either: one
        timer per connection, moved on lazily (`_on_timer`), so a wait only notes its start."""
        waiter = self.waiter = self.loop.create_future()
        self.wait_timeout = timeout
        if timeout is None:
            self._disarm()
        else:
            self.wait_deadline = self.loop.time() + timeout
            if self.timer is None or self.timer.when() > self.wait_deadline:
                self._arm(self.wait_deadline)
        try:
            await waiter
        finally:
            if self.waiter is waiter:  # else the connection was handed back (`_reset`) and
                self.waiter = None  # may be waited on for its next response already

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        """The read timer: the wait in progress has passed its deadline (ReadTimeout), or it
        started after the timer was set (the timer moves on to its deadline)."""
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # no wait in progress: the next one sets the timer again
        if self.loop.time() >= self.wait_deadline:
            waiter.set_exception(httpx.ReadTimeout("timed out waiting for the response"))
        else:
            self._arm(self.wait_deadline)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def read_head(self, head_only: bool, timeout: float | None) -> _Head:
        """Output: the response's status and headers (after any 1xx)."""
        self.head_only = head_only
        while self.head is None:
            if self.error is not None:
                raise self.error
            await self._wait(timeout)
        return self.head

    async def next_chunk(self, timeout: float | None) -> tuple[bytes, float, float] | None:
        """Output: the next body chunk with its arrival stamp and how long after it the chunk
        was read (see `deliver`), or None at the body's end — or, with an `on_read` hook, when
        the hook took every chunk and woke the reader (a stop, the body's end)."""
        tried, turn = False, self.turn
        while not self.chunks or self.turn != turn:
            if self.turn != turn:  # handed back meanwhile (`ResponseStream.hand_back`): what
                return None  # the connection holds now is the next response's
            if self.error is not None:
                raise self.error
            if self.complete:
                return None
            self._start_reading()
            if (not tried and self.reading and not self.by_thread
                    and self.thread_reads == self.thread_delivered):
                # what the socket already holds, without a trip through the loop (not while
                # the thread's earlier reads wait on the loop: they come first)
                tried = True
                self._on_readable()
                continue
            await self._wait(timeout)
            if self.interrupted and self.turn == turn:  # the `on_read` hook woke it for a stop
                self.interrupted = False
                if not self.chunks and self.error is None:
                    return None
        item = self.chunks.popleft()
        self.buffered -= len(item[0])
        return item

    def reusable(self) -> bool:
        """Output: True when the response was read to its end and the server keeps the
        connection open."""
        return (self.complete and self.error is None and not self.chunks and not self.closed
                and self.head is not None and not self.head_only and self.keep_alive)

    def close_socket_only(self) -> None:
        if not self.closed:
            self._disarm()
            self._stop_reading()
            self.closed = True
            self.sock.close()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.close_socket_only()
        self._wake()


_ADDRESSES: dict[tuple[str, int], list] = {}  # resolved origins (a run talks to one engine)
_ENDED = [0]  # responses read to their end by this process's connections (`responses_ended`)


def responses_ended() -> int:
    """Output: how many responses `WireTransport` connections have read to their end so far in
    this process (counted on the event loop as each one's last byte is parsed). A change tells
    the runner's deferred work that answers just ended: their sessions' next steps are queued
    on the loop, and it lets them go first."""
    return _ENDED[0]


def _literal(host: str, port: int) -> list | None:
    """Output: getaddrinfo-shaped entries for an IP address literal, else None."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        address = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]
    return None


class _Reader:
    """One background thread that reads every stamped connection's socket as soon as bytes
    arrive (epoll), so each read holds one packet's worth and its kernel stamp is that packet's
    arrival. Read on the event loop instead, a busy loop reads late; by then the next packet of
    the stream is queued too, the kernel merges them and keeps the newer time, and the first
    token would be stamped with the second token's arrival. Parsing stays on the loop: each
    poll round's reads go to it in one `call_soon_threadsafe` per loop. The thread runs at nice
    19 (`_reader_priority`): it reads when the loop's thread waits or within its own small share
    of the CPU, instead of preempting the loop's thread on every packet.

    When it did not get the CPU in time, a read holds several packets; each read says how much
    earlier than its stamp its first bytes may have come (`_Connection.doubt`). A poll round that
    did not report a watched socket shows it was empty when the round began, so the thread polls
    at least every `_ROUND_S` while it watches sockets: that bounds the doubt to the time it was
    kept from running, plus a round."""

    def __init__(self) -> None:
        import select

        self.epoll = select.epoll()
        self.lock = threading.Lock()
        self.conns: dict[int, _Connection] = {}
        thread = threading.Thread(target=self._run, name="wl-socket-reader", daemon=True)
        thread.start()
        self.tid = thread.native_id  # for `alone`

    def add(self, conn: "_Connection") -> None:
        """Start reading `conn` (from the loop thread)."""
        fd = conn.sock.fileno()
        with self.lock:
            known = self.conns.get(fd)
            if known is conn:
                return
            if known is not None:  # a socket closed without remove(): its number is reused
                try:
                    self.epoll.unregister(fd)
                except OSError:
                    pass
            self.conns[fd] = conn
            self.epoll.register(fd, _EPOLLIN)
            conn.watched_at = time.perf_counter()

    def remove(self, conn: "_Connection") -> None:
        """Stop reading `conn`; once this returns the thread does not touch its socket."""
        with self.lock:
            self._drop(conn.sock.fileno(), conn)

    def _drop(self, fd: int, conn: "_Connection") -> None:
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            self.epoll.unregister(fd)

    def _run(self) -> None:
        _reader_priority()
        floor = float("-inf")  # when the last round began whose poll reported every ready socket
        while True:
            began, most = time.perf_counter(), len(self.conns) + 64
            try:
                events = self.epoll.poll(0, most)
                if not events:  # none was ready at `began`: what the next poll reports came later
                    floor = began
                    events = self.epoll.poll(_ROUND_S if self.conns else -1, most)
            except InterruptedError:
                continue
            batches: dict[Any, list] = {}
            with self.lock:  # queued on the loop before remove() can return
                for fd, _ in events:
                    conn = self.conns.get(fd)
                    if conn is not None:
                        self._read(fd, conn, batches, floor)
                for loop, items in batches.items():
                    try:
                        loop.call_soon_threadsafe(_deliver_all, items)
                    except RuntimeError:  # that event loop is closed: nobody is waiting
                        pass
            # a full poll may have left ready sockets out: it shows nothing about the others
            floor = began if len(events) < most else float("-inf")

    def _read(self, fd: int, conn: "_Connection", batches: dict[Any, list], floor: float) -> None:
        before = _data_segments(conn.sock) if conn.consumed is not None else None
        start = conn.clock()
        try:
            data, anc, _, _ = conn.sock.recvmsg(_READ_SIZE, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(fd, conn)
            conn.thread_reads += 1
            batches.setdefault(conn.loop, []).append((conn, None, 0.0, exc, 0.0))
            return
        if not data:
            self._drop(fd, conn)  # EOF stays readable: stop polling it
        conn.thread_reads += 1
        stamp = _arrival(anc, conn.clock)
        doubt = conn.doubt(stamp, start, before, len(data), floor) if data else 0.0
        batches.setdefault(conn.loop, []).append((conn, data, stamp, None, doubt))


READER_NICE = 19  # the reader thread's nice value


def alone(on: bool) -> None:
    """The run has one request in flight, timed alone (`isolated`), while `on`: the reader
    thread is then scheduled first (real-time `SCHED_FIFO`, else normal priority), so that it
    reads each packet of that answer the moment it lands. At nice 19 other processes on its CPU
    (the engine's among them) can keep it from running until the first token's packet has
    company: the kernel then merges them and keeps the newer stamp, and the TTFT is a range.
    The thread only reads and hands over, so it holds a CPU for microseconds a packet. With one
    stream nothing is lost: nice 19 is for many streams, where a reader preempting the loop's
    thread costs the client its turnaround. Without the right to raise a thread's priority (not
    root, no CAP_SYS_NICE) it stays at nice 19."""
    tid = _reader().tid
    try:
        if on:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
        else:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, READER_NICE)
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0 if on else READER_NICE)
        except (AttributeError, OSError):
            pass


def _reader_priority() -> None:
    """Give the calling thread the nice value `READER_NICE`, the lowest priority (on Linux the
    nice value is per thread). At normal priority the reader thread, woken by every packet,
    preempted the event loop's thread and then waited for the GIL it held: two context switches
    and a GIL hand-off per packet, which slows a saturated client and delays the loop's
    turnaround of answers. At nice 19 it reads when the loop's thread waits, or within its
    small share of the CPU; at 128-256 busy streams that can be late enough for a first token
    to share a read with the next one, which the read's `doubt` then says."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), READER_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


def _deliver_all(items: list) -> None:
    """On the loop: hand each read to its connection, in the order they were read."""
    for conn, data, stamp, exc, doubt in items:
        conn.thread_delivered += 1
        conn.deliver(data, stamp, exc, doubt)


_READER: _Reader | None = None
_READER_LOCK = threading.Lock()
_EPOLLIN = 0x001


def _reader() -> _Reader:
    """Output: the process's reader thread (started on first use)."""
    global _READER
    if _READER is None:
        with _READER_LOCK:
            if _READER is None:
                _READER = _Reader()
    return _READER


class ResponseStream(httpx.AsyncByteStream):
    """A response body read from a `_Connection`. Iterating yields the body chunk by chunk (one
    per socket read); `arrival` is the stamp of the chunk last yielded. Closing it hands the
    connection back to the pool when the body was read to its end, else closes it."""

    def __init__(self, conn: _Connection, pool: WireTransport, origin: tuple[str, int],
                 timeout: float | None) -> None:
        self._conn, self._pool, self._origin, self._timeout = conn, pool, origin, timeout
        self.clock = conn.clock
        self.arrival: float | None = None
        self.doubt = 0.0  # how much earlier than `arrival` the chunk last yielded may have begun
        self._closed = False
        self._handed_back = False

    def on_read(self, hook: Callable[[], bool]) -> None:
        """From now on, call `hook` on the loop after each read of the body is parsed (in the
        transport's read callback) instead of waking the body's reader: the hook takes what
        is queued (`queued`), may `hand_back` the connection at the body's end (`ended`), and
        returns True when the reader must be woken (it has something to do). It must not
        raise (if it does, the reader raises the same exception: `_hook_failed`). A read that
        fails wakes the reader as usual."""
        if not self._handed_back:
            self._conn.on_read = hook

    def ended(self) -> bool:
        """Output: True when the body's last byte has been parsed."""
        return self._handed_back or self._conn.complete

    def queued(self) -> Iterator[bytes]:
        """Yield the body chunks read and not yet taken, as iterating would (`arrival` and
        `doubt` set for each), without waiting."""
        chunks = self._conn.chunks
        while chunks and not self._handed_back:
            item = chunks.popleft()
            self._conn.buffered -= len(item[0])
            self.arrival, self.doubt = item[1], item[2]
            yield item[0]

    def hand_back(self) -> bool:
        """When the body was read to its end and all of it taken, and the connection may be
        reused: give it back to the pool now, as closing would. The body then ends for its
        reader (iterating stops; the connection's next response is not this one's).
        Output: True when handed back."""
        conn = self._conn
        if self._handed_back or self._closed or not conn.reusable():
            return False
        self._handed_back = self._closed = True
        conn._reset()
        self._pool.release(self._origin, conn)
        return True

    def read_on_loop(self) -> None:
        """What needed each packet's own arrival (the first tokens) has been read: read the rest
        on the event loop (`_Connection.read_on_loop`)."""
        if not self._handed_back:
            self._conn.read_on_loop()

    def __aiter__(self) -> "ResponseStream":
        return self  # an iterator object, not an async generator: one left unfinished costs nothing

    async def __anext__(self) -> bytes:
        item = None if self._handed_back else await self._conn.next_chunk(self._timeout)
        if item is None:
            raise StopAsyncIteration
        self.arrival, self.doubt = item[1], item[2]
        return item[0]

    def at_end(self) -> bool:
        """Output: True when the body has been read to its end (nothing is left to read)."""
        conn = self._conn
        return self._handed_back or (conn.complete and not conn.chunks and conn.error is None)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.reusable():
            conn._reset()
            self._pool.release(self._origin, conn)
        else:
            conn.close()
