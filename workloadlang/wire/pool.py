"""The wire client's connection pool: plain HTTP/1.1, O(1) checkout, requests written ahead.

Input: `Outgoing` requests (`workloadlang.wire.request`). Output: `StampedResponse`s whose body
chunks carry when they reached the socket (`workloadlang.wire.response`).

- An idle stack per origin: the most recently released connection first; a connection idle
  longer than `keepalive_expiry` seconds, or that the server has closed, is dropped at checkout
  (servers close idle keep-alive connections: llama.cpp and uvicorn after 5 s).
- `open(out)` writes a request (the first write in the caller's task, no loop round trip
  between its send stamp and its bytes leaving) and reads its head.
- `write_now(out)` writes a request at once, without awaiting, on an idle connection, before its
  turn comes (the runner's pacing writes a session's next request the moment its answer ended);
  `open(out)` then finishes the write and reads the answer. `claim(url, n)` takes idle
  connections for the run's start, when every session's first request is written in one go.
- `ended` counts the responses read to their end (their last byte parsed, on the loop).

Not supported (the https path, `HttpxTransport`, has them): TLS, proxies, HTTP/2,
`Expect: 100-continue`, upgrades.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from workloadlang.wire.connection import Addresses, Connection
from workloadlang.wire.reader import Reader
from workloadlang.wire.request import Outgoing, rest_after, target_of
from workloadlang.wire.response import StampedResponse


class Pool:
    """Connections to any number of origins (see the module). `reader`: the thread that reads
    stamped sockets, shared with others (e.g. the run's); None: the pool makes its own on first
    use and stops it at `aclose`. `clock`: the monotonic clock stamps are expressed in (tests
    inject one: the event loop then reads, and stamps `clock()`). `stamped` False: no reader
    thread, every socket read on the event loop (calls whose answers are not timed)."""

    def __init__(self, reader: Reader | None = None, *, keepalive_expiry: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter, stamped: bool = True) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = {}
        self._expiry = keepalive_expiry
        self.clock = clock
        self._own_reader = reader is None and stamped
        self.reader: Reader | None = reader if reader is not None or not stamped else Reader()
        self.addresses: Addresses = {}
        self.connects = 0  # connections opened
        self.ended = 0  # responses read to their end

    def _count_end(self) -> None:
        self.ended += 1

    async def open(self, out: Outgoing) -> StampedResponse:
        """Send `out` (or finish writing it, when `write_now` began) and read its head.
        Output: the response with its body still streaming; the connection returns to the pool
        when it is closed. Raises a `WireError` (`ConnectionDropped` when the server closed a
        reused connection before answering: nothing was processed)."""
        if out.target.scheme != "http":
            raise ValueError(f"the wire pool speaks http://, not {out.target.scheme}://")
        origin = out.target.origin
        if out.conn is not None:  # `write_now` wrote it (or its beginning) already
            conn, rest = out.conn, out.rest
            out.conn, out.rest = None, b""
        else:
            rest = b"".join(out.payload())
            conn = await self._checkout(origin, out.timeout)
        try:
            if rest:
                await conn.send(rest, out.timeout)
            await conn.read_head(out.method == "HEAD", out.timeout)
        except BaseException:
            conn.close()
            raise
        return StampedResponse(conn, lambda c: self.release(origin, c), out.timeout)

    async def preconnect(self, url: str, n: int, timeout: float = 5.0) -> int:
        """Open connections to `url`'s origin until `n` are idle; output: how many were
        opened. Failures are left to the requests. Starts the reader thread too (before the
        clock, where this is called)."""
        if self.reader is not None:
            self.reader.start()
        origin = target_of(url).origin
        missing = n - len(self._idle.get(origin, ()))
        opened = await asyncio.gather(*(self._connect(origin, timeout)
                                        for _ in range(max(0, missing))), return_exceptions=True)
        conns = [c for c in opened if isinstance(c, Connection)]
        for conn in conns:
            self.release(origin, conn)
        return len(conns)

    def write_now(self, out: Outgoing) -> bool:
        """Without awaiting: write `out` on an idle live connection to its origin. Output: True
        when written, wholly or in part (`out.conn`, `out.rest`, `out.sent_at`); False when
        nothing was (no idle live connection, the socket took no byte): open it as usual."""
        if out.written:
            return False
        conn = self.idle_connection(out.target.origin)
        return conn is not None and self.write_on(conn, out)

    def write_on(self, conn: Connection, out: Outgoing, read: bool = True) -> bool:
        """`write_now` on `conn`, an idle connection to `out`'s origin taken from the pool.
        `read`: start reading its answer now; else the caller does (`StartWrites`). Output:
        as `write_now`'s (False: `conn` went back to the pool, or was closed)."""
        try:
            payload = out.payload()
        except BaseException:  # a piece that is not bytes: the connection must not leak
            conn.close()
            raise
        sent_at, unix = self.clock(), time.time()
        sent = conn.write_now(payload, sent_at)
        if sent is None:
            return False
        if sent == 0:
            self.release(out.target.origin, conn)
            return False
        if read:
            conn.start_reading()
        out.conn, out.rest = conn, rest_after(payload, sent)
        out.sent_at, out.sent_unix, out.clock = sent_at, unix, self.clock
        return True

    def claim(self, url: str, n: int) -> StartWrites:
        """Before the clock: up to `n` idle live connections to `url`'s origin, taken from the
        pool for the run's start (`StartWrites`)."""
        origin = target_of(url).origin
        conns: list[Connection] = []
        while len(conns) < n and (conn := self.idle_connection(origin)) is not None:
            conns.append(conn)
        conns.reverse()  # the most recently released first, as the pool hands them out
        return StartWrites(self, origin, conns)

    def idle_connection(self, origin: tuple[str, int]) -> Connection | None:
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

    async def _checkout(self, origin: tuple[str, int], timeout: float | None) -> Connection:
        """Output: the most recently released live idle connection to `origin`, or a new one."""
        conn = self.idle_connection(origin)
        return conn if conn is not None else await self._connect(origin, timeout)

    async def _connect(self, origin: tuple[str, int], timeout: float | None) -> Connection:
        conn = await Connection.open(origin, timeout, self.clock, self.reader, self._count_end,
                                     self.addresses)
        self.connects += 1
        return conn

    def release(self, origin: tuple[str, int], conn: Connection) -> None:
        """Give a connection whose response was read to its end back to the idle stack."""
        if conn.closed:
            return
        conn.released_at = self.clock()
        self._idle.setdefault(origin, []).append(conn)

    async def aclose(self) -> None:
        """Close every idle connection; stop the reader thread when it is the pool's own."""
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()
        if self._own_reader and self.reader is not None:
            self.reader.close()

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class StartWrites:
    """The run's start: every session's first request written one after the other, the last of
    them delayed by all the writes before it, so each write does only what must happen then.
    `Pool.claim` (before the clock) takes idle connections, their liveness checked then;
    `write` writes one request on the next of them, without starting to read its answer;
    `begin_reading` (after the last write) starts reading every answer. Reading later changes
    no first-token stamp: a read's stamp is its newest packet's arrival as the kernel saw it,
    and a read of several packets says how much earlier its bytes may have come (its doubt).
    `close` gives back the connections not used."""

    def __init__(self, pool: Pool, origin: tuple[str, int], conns: list[Connection]) -> None:
        self.pool, self.origin, self.conns = pool, origin, conns
        self.written: list[Connection] = []

    def write(self, out: Outgoing) -> bool:
        """Output: True when `out` was written on a claimed connection."""
        if not self.conns or out.written or out.target.origin != self.origin:
            return False
        conn = self.conns.pop()
        if not self.pool.write_on(conn, out, read=False):
            return False
        self.written.append(conn)
        return True

    def begin_reading(self) -> None:
        """Start reading the answer of every request written (of the live connections)."""
        for conn in self.written:
            conn.start_reading()
        self.written = []

    def close(self) -> None:
        """Give the connections not used back to the pool."""
        for conn in self.conns:
            self.pool.release(self.origin, conn)
        self.conns = []
