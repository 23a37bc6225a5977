"""One HTTP/1.1 connection of the wire client: a non-blocking socket, responses parsed by
`httptools` (llhttp, the parser uvicorn uses), every read stamped with when its bytes reached
the socket.

Input: an origin to connect to, the clock stamps are expressed in (monotonic), the `Reader`
that reads stamped sockets (None: the event loop reads them), and the pool's counter of answers
read to their end. Output: response heads (`read_head`) and body chunks with their arrival
stamps (`next_chunk`, or `on_read` for a consumer that takes each read as it is parsed).

Reads. On Linux the kernel stamps each received packet (`SO_TIMESTAMPNS`, `workloadlang.stamps`);
the reader thread reads a socket as soon as bytes land and it gets a CPU, so a read holds one
packet and its stamp is that packet's arrival; parsing stays on the loop. A read that held more
than one packet (counted by the kernel) carries its `doubt`: how much earlier than the stamp
(the newest packet's) its first bytes may have come. Once the consumer has the first tokens
(`read_on_loop`) the rest of the response is read by the loop itself, still kernel-stamped (the
newest packet's time: exact for the stream's end). With an injected clock, or elsewhere than
Linux, the loop reads and stamps `clock()`.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from collections.abc import Callable
from typing import Any

import httptools

from workloadlang.stamps import CMSG_SPACE as _CMSG_SPACE
from workloadlang.stamps import SO_TIMESTAMPNS as _SO_TIMESTAMPNS
from workloadlang.stamps import arrival as _arrival
from workloadlang.stamps import data_segments as _data_segments
from workloadlang.stamps import enable as _enable_stamps
from workloadlang.wire.exceptions import (
    ConnectError,
    ConnectionDropped,
    ConnectTimeout,
    ProtocolError,
    ReadError,
    ReadTimeout,
    WriteError,
    WriteTimeout,
)
from workloadlang.wire.reader import READ_SIZE, Reader

_PAUSE_BYTES = 4 * 1024 * 1024  # stop reading a response whose consumer is this far behind
_MAX_PIECES = 512  # pieces written in one sendmsg (the kernel takes up to IOV_MAX, 1024 on Linux)
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows

Addresses = dict[tuple[str, int], list[Any]]  # resolved origins, kept by the pool

class Head:
    """A parsed status line and headers."""

    __slots__ = ("status", "reason", "headers")

    def __init__(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.reason, self.headers = status, reason, headers


class Connection:
    """One HTTP/1.1 connection: a non-blocking socket read by the reader thread (kernel stamps) or
    a loop reader callback into an httptools parser (on the loop). Body bytes are queued with
    their arrival stamps; `next_chunk` awaits them. `on_end` is called as each response's last
    byte is parsed (the pool counts them)."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float],
                 reader: Reader | None = None,
                 on_end: Callable[[], None] = lambda: None) -> None:
        self.sock = sock
        self.reader = reader
        self.on_end = on_end
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
        self.reset()

    @classmethod
    async def open(cls, origin: tuple[str, int], timeout: float | None,
                   clock: Callable[[], float], reader: Reader | None = None,
                   on_end: Callable[[], None] = lambda: None,
                   addresses: Addresses | None = None) -> Connection:
        """Connect to `origin` (each resolved address in turn; `addresses` keeps what a name
        resolved to). Raises ConnectError / ConnectTimeout."""
        try:
            sock = await asyncio.wait_for(_connect(origin, {} if addresses is None
                                                   else addresses), timeout)
        except asyncio.TimeoutError:
            raise ConnectTimeout(f"connecting to {origin[0]}:{origin[1]} timed out") from None
        return cls(sock, clock, reader, on_end)

    def reset(self) -> None:
        """Prepare for the next response on this connection."""
        self._disarm()
        self.parser = httptools.HttpResponseParser(self)
        self.head: Head | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.chunks: collections.deque[tuple[bytes, float, float]] = collections.deque()
        self.pieces: list[bytes] = []  # body pieces of the read being parsed
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None  # a wire error, or what `on_read` raised
        self.waiter: asyncio.Future[Any] | None = None
        self.received_any = False
        self.head_only = False
        self.stamp = 0.0
        self.reading = False
        self.by_thread = False  # being read by the reader thread (else: on the loop)
        self.on_loop = False  # `read_on_loop` was called for this response
        self.on_read: Callable[[], bool] | None = None  # see `StampedResponse.on_read`
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
            raise WriteTimeout("sending the request timed out") from None
        except OSError as exc:
            if self.reused:
                raise ConnectionDropped(f"server closed the connection: {exc}") from exc
            raise WriteError(f"cannot send the request: {exc}") from exc
        self.start_reading()

    def write_now(self, payload: list[bytes], now: float) -> int | None:
        """Without awaiting: write `payload` (pieces: one `sendmsg`, no copy joining them) as
        far as the socket takes it, the request's send time being `now`. Output: the bytes
        written, or None when the socket failed (the connection is then closed)."""
        if len(payload) > 1 and (len(payload) > _MAX_PIECES or not _HAS_SENDMSG):
            payload = [b"".join(payload)]
        self.mark_sent(now)
        try:
            return self.sock.sendmsg(payload) if len(payload) > 1 else self.sock.send(payload[0])
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self.close()
            return None
        except BaseException:  # none is known to happen; the connection must not leak either way
            self.close()
            raise

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
        self.drained = size < READ_SIZE
        if self.drained:  # what comes next came after `start`, and after `before` packets
            self.floor, self.consumed = start, before
        return 0.0 if packets is not None and packets <= 1 else max(0.0, stamp - floor)

    def start_reading(self) -> None:
        if not self.reading and not self.closed:
            self.reading = True
            self.by_thread = self._stamped and self.reader is not None and not self.on_loop
            if self.by_thread:
                assert self.reader is not None
                self.reader.add(self)
            else:
                self.loop.add_reader(self.sock.fileno(), self._on_readable)

    def _stop_reading(self) -> None:
        if self.reading:
            self.reading = False
            if self.by_thread:
                assert self.reader is not None  # reading by the thread: there is one
                self.reader.remove(self)
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
            self.start_reading()

    def _on_readable(self) -> None:
        """Loop callback: read what the socket holds, stamped by the kernel (Linux) or on read."""
        try:
            if self._stamped:
                data, anc, _, _ = self.sock.recvmsg(READ_SIZE, _CMSG_SPACE)
                stamp = _arrival(anc, self.clock)
            else:
                data, stamp = self.sock.recv(READ_SIZE), self.clock()
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
            self._set_error(ProtocolError(f"malformed HTTP response: {exc}"))
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

    def _hook_failed(self, exc: Exception, waiter: asyncio.Future[Any] | None,
                     turn: int) -> None:
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
            self._set_error(ReadError(f"reading the response failed: {exc}"))
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
            self._set_error(ProtocolError(
                "peer closed connection without sending complete message body"))
        self.close_socket_only()
        self._wake()

    def _close_delimited(self) -> bool:
        names = {name.lower() for name, _ in self.head.headers} if self.head else set()
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _set_error(self, error: Exception) -> None:
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
        self.head = Head(status, self.reason, self.headers)
        if self.head_only:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        if self.head is not None:
            self.complete = True
            self.on_end()
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
            waiter.set_exception(ReadTimeout("timed out waiting for the response"))
        else:
            self._arm(self.wait_deadline)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def read_head(self, head_only: bool, timeout: float | None) -> Head:
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
            if self.turn != turn:  # handed back meanwhile (`StampedResponse.hand_back`): what
                return None  # the connection holds now is the next response's
            if self.error is not None:
                raise self.error
            if self.complete:
                return None
            self.start_reading()
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



def _literal(host: str, port: int) -> list[Any] | None:
    """Output: getaddrinfo-shaped entries for an IP address literal, else None."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        address = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]
    return None



async def _connect(origin: tuple[str, int], addresses: Addresses) -> socket.socket:
    """Output: a connected non-blocking socket to `origin`, stamped by the kernel where it can
    be, trying each address the name resolves to. Raises ConnectError."""
    loop = asyncio.get_running_loop()
    host, port = origin
    infos = addresses.get(origin) or _literal(host, port)
    if infos is None:
        try:  # a thread-pool call: done once per origin, not per connection
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses[origin] = infos
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
        return sock
    raise ConnectError(f"cannot connect to {host}:{port}: {last}")
