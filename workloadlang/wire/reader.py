"""The reader thread: reads every stamped connection's socket as soon as bytes arrive.

Input: connections to watch (`add`, `remove`, from the event loop's thread). Output: each read
(bytes, the kernel's arrival stamp, how much earlier its first bytes may have come) handed to
its connection on the connection's loop, in the order read.

Why a thread: read on the event loop instead, a busy loop reads late; by then the next packet of
the stream is queued too, the kernel merges them and keeps the newer time, and the first token
would be stamped with the second token's arrival. Parsing stays on the loop: each poll round's
reads go to it in one `call_soon_threadsafe` per loop.

Priority: the thread runs at nice `nice` (19, the lowest, by default): it reads when the loop's
thread waits, or within its own small share of the CPU, instead of preempting the loop's thread
on every packet (two context switches and a GIL hand-off per packet, which slows a saturated
client). At 128-256 busy streams that can be late enough for a first token to share a read
with the next one, which the read's `doubt` then says. While a request is timed alone
(`alone(True)`) the thread is scheduled first instead: with one stream nothing is lost by it.

A poll round that did not report a watched socket shows it was empty when the round began, so
the thread polls at least every `_ROUND_S` while it watches sockets: that bounds a read's doubt
to the time the thread was kept from running, plus a round.

One `Reader` per run (or per `Pool` that makes its own): two runs in one process never share
one. `close()` stops the thread.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from workloadlang.stamps import CMSG_SPACE, arrival, data_segments

READ_SIZE = 256 * 1024  # bytes a read takes at most
_ROUND_S = 0.001  # the thread polls at least this often while it watches a socket
_EPOLLIN = 0x001
LOWEST_NICE = 19


class Watched(Protocol):
    """What the reader needs of a connection (`wire.connection.Connection`)."""

    sock: socket.socket
    loop: Any  # the event loop its reads are handed to
    clock: Callable[[], float]
    consumed: int | None
    watched_at: float
    thread_reads: int
    thread_delivered: int

    def doubt(self, stamp: float, start: float, before: int | None, size: int,
              round_floor: float) -> float: ...

    def deliver(self, data: bytes | None, stamp: float, exc: OSError | None,
                doubt: float = 0.0) -> None: ...


class Reader:
    """One background thread that reads the sockets of the connections given to it (Linux,
    epoll). The thread starts with the first connection and stops at `close`."""

    def __init__(self, nice: int = LOWEST_NICE) -> None:
        self.nice = nice
        self.lock = threading.Lock()
        self.conns: dict[int, Watched] = {}
        self.epoll: Any = None
        self.thread: threading.Thread | None = None
        self.tid: int | None = None  # the thread's native id, once started
        self.wake_r = self.wake_w = -1
        self.closing = False
        self.first = False  # scheduled first (`alone`)

    def start(self) -> None:
        """Start the thread now, if it has not started (else the first connection starts it)."""
        with self.lock:
            if self.thread is None and not self.closing:
                self._start()

    def _start(self) -> None:
        """Start the thread (under `lock`)."""
        self.epoll = select.epoll()
        self.wake_r, self.wake_w = os.pipe()
        self.epoll.register(self.wake_r, _EPOLLIN)
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,),
                                       name="wl-socket-reader", daemon=True)
        self.thread.start()
        started.wait()

    def add(self, conn: Watched) -> None:
        """Start reading `conn` (from the loop's thread)."""
        fd = conn.sock.fileno()
        with self.lock:
            if self.closing:
                raise RuntimeError("the reader is closed")
            if self.thread is None:
                self._start()
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

    def remove(self, conn: Watched) -> None:
        """Stop reading `conn`; once this returns the thread does not touch its socket."""
        with self.lock:
            self._drop(conn.sock.fileno(), conn)

    def alone(self, on: bool) -> None:
        """While `on`, the run has one request in flight, timed alone: the thread is scheduled
        first (real-time `SCHED_FIFO`, else normal priority), so that it reads each packet of
        that answer the moment it lands (at nice 19 other processes on its CPU, the engine's
        among them, could keep it from running until the first token's packet has company).
        Without the right to raise a thread's priority (not root, no CAP_SYS_NICE) it stays at
        its nice value. A thread not started yet starts so."""
        with self.lock:  # not while the thread starts: it reads `first` then
            self.first = on
            tid = self.tid
        if tid is not None:
            self._priority(tid, on)

    def _priority(self, tid: int, first: bool) -> None:
        """Schedule thread `tid` first (`first`), else at nice `nice`."""
        try:
            if first:
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
            else:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, tid, self.nice)
        except (AttributeError, OSError):  # not Linux, or not allowed
            try:
                os.setpriority(os.PRIO_PROCESS, tid, 0 if first else self.nice)
            except (AttributeError, OSError):
                pass

    def close(self) -> None:
        """Stop the thread (idempotent); connections still watched are left unread."""
        with self.lock:
            if self.closing:
                return
            self.closing = True
            thread = self.thread
            if thread is not None:
                os.write(self.wake_w, b"x")
        if thread is not None:
            thread.join()
            self.epoll.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
        self.conns.clear()

    def _drop(self, fd: int, conn: Watched) -> None:
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            self.epoll.unregister(fd)

    def _run(self, started: threading.Event) -> None:
        tid = threading.get_native_id()
        self._priority(tid, self.first)  # on Linux a nice value is per thread
        self.tid = tid
        started.set()
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
            batches: dict[Any, list[Any]] = {}
            with self.lock:  # queued on the loop before remove() can return
                if self.closing:
                    return
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

    def _read(self, fd: int, conn: Watched, batches: dict[Any, list[Any]],
              floor: float) -> None:
        before = data_segments(conn.sock) if conn.consumed is not None else None
        start = conn.clock()
        try:
            data, anc, _, _ = conn.sock.recvmsg(READ_SIZE, CMSG_SPACE)
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
        stamp = arrival(anc, conn.clock)
        doubt = conn.doubt(stamp, start, before, len(data), floor) if data else 0.0
        batches.setdefault(conn.loop, []).append((conn, data, stamp, None, doubt))


def _deliver_all(items: list[Any]) -> None:
    """On the loop: hand each read to its connection, in the order they were read."""
    for conn, data, stamp, exc, doubt in items:
        conn.thread_delivered += 1
        conn.deliver(data, stamp, exc, doubt)
