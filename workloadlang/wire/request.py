"""A request as the bytes the wire client writes, and what happened to it on the wire.

Input: a method, a URL, headers and the body as parts (a conversation re-sent with one more turn
keeps its earlier messages as parts of their own: a large body is never copied to be joined).
Output: an `Outgoing`: its head (request line and headers, up to `Content-Length`, which the
body decides), `payload()` (what one `sendmsg` writes: a small request joined, a large one as
head, length and body parts), and its state
once written ahead of its turn (`Pool.write_now`): on which connection, what is left to write,
when it was written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from workloadlang import __version__

if TYPE_CHECKING:  # a connection writes requests: it imports this module
    from workloadlang.wire.connection import Connection

USER_AGENT = f"workloadlang/{__version__}"
_DEFAULT_PORTS = {"http": 80, "https": 443}
JOIN_BYTES = 64 * 1024  # a request up to this size is written as one piece (`Outgoing.payload`)


class Target(NamedTuple):
    """Where a URL points: `origin` (host, port) for the connection pool, the `Host` header's
    value and the request target (path and query)."""

    scheme: str
    origin: tuple[str, int]
    host_header: str
    path: bytes


@functools.lru_cache(maxsize=64)
def target_of(url: str) -> Target:
    """Input: an absolute http(s) URL. Output: its `Target`, parsed once per distinct URL.
    Raises ValueError for a URL without an http(s) scheme or a host, or with a bad port."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    if parts.port is not None and parts.port != _DEFAULT_PORTS[parts.scheme]:
        shown += f":{parts.port}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, (host, port), shown, path.encode("ascii"))


def _header_line(name: str, value: str) -> bytes:
    """Output: `name: value` and its line end, ASCII. Raises ValueError for a name that is no
    token or a value with a line break (either would let a value write a header of its own)."""
    if not name or any(c in name for c in ":\r\n \t\0"):
        raise ValueError(f"not a header name: {name!r}")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"the value of header {name} holds a line break")
    return name.encode("ascii") + b": " + value.encode("ascii") + b"\r\n"


def request_head(method: str, target: Target, headers: Iterable[tuple[str, str]]) -> bytes:
    """Output: the request line, `Host`, `User-Agent` (unless given) and `headers`, each line
    ended, without the blank line: `Content-Length` and the head's end follow
    (`content_length`). Raises ValueError (see `_header_line`; non-ASCII text)."""
    lines = [method.encode("ascii") + b" " + target.path + b" HTTP/1.1\r\n",
             _header_line("Host", target.host_header)]
    given = list(headers)
    if not any(name.lower() == "user-agent" for name, _ in given):
        lines.append(_header_line("User-Agent", USER_AGENT))
    lines += [_header_line(name, value) for name, value in given]
    return b"".join(lines)


def content_length(size: int) -> bytes:
    """Output: the `Content-Length` line of a body of `size` bytes and the head's end."""
    return b"Content-Length: %d\r\n\r\n" % size


class Outgoing:
    """One request: its bytes and its deadline (`timeout`, seconds for each of connecting,
    writing and each wait for the answer; None: none), and once `Pool.write_now` wrote it
    ahead of its turn: `conn` (the connection it went out on), `rest` (what the socket did not
    take yet: the pool writes it when the request is opened), `sent_at` on the pool's `clock`
    and `sent_unix` (wall clock). Opening it (`Pool.open`) then only finishes the write and
    reads the answer (it takes `conn`: a request sent again after its connection dropped goes
    out whole on another)."""

    __slots__ = ("method", "url", "target", "head", "body", "timeout", "conn", "rest",
                 "sent_at", "sent_unix", "clock")

    def __init__(self, method: str, url: str, headers: Iterable[tuple[str, str]],
                 body: Sequence[bytes] | None, timeout: float | None = None,
                 head: bytes | None = None) -> None:
        """`head`: the head made earlier for the same method, URL and headers (`request_head`),
        so that a request made ahead costs no second one. Raises ValueError (see
        `request_head`, `target_of`)."""
        self.method, self.url, self.target = method, url, target_of(url)
        self.head = head if head is not None else request_head(method, self.target, headers)
        self.body = list(body) if body is not None else None
        self.timeout = timeout
        self.conn: Connection | None = None
        self.rest = b""
        self.sent_at = self.sent_unix = 0.0
        self.clock: Callable[[], float] | None = None

    def payload(self) -> list[bytes]:
        """Output: every byte of the request: one piece when it is at most `JOIN_BYTES` (a
        copy costs less than a write of many pieces, and the write is inside the request's
        send time), else in pieces: head, length, the body's parts (a long conversation is not
        copied again)."""
        if self.body is None:
            return [self.head + b"\r\n"]
        size = sum(map(len, self.body))
        pieces = [self.head, content_length(size), *self.body]
        return [b"".join(pieces)] if size + len(self.head) <= JOIN_BYTES else pieces

    @property
    def written(self) -> bool:
        """True once `Pool.write_now` wrote it (or its beginning)."""
        return self.clock is not None

    def sent_on(self, clock: Callable[[], float]) -> tuple[float, float] | None:
        """Output: (when it was written on `clock`, wall-clock time) when it was written ahead
        and the pool's clock is `clock`; else None (written at its turn, or on another clock,
        whose times cannot be compared)."""
        return (self.sent_at, self.sent_unix) if self.written and self.clock is clock else None


def rest_after(parts: Sequence[bytes], sent: int) -> bytes:
    """Output: what is left of `parts`, joined, after their first `sent` bytes."""
    for i, part in enumerate(parts):
        if sent < len(part):
            return b"".join([part[sent:], *parts[i + 1:]])
        sent -= len(part)
    return b""
