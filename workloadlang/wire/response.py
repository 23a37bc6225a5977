"""A response as the chat client reads it: status, headers and a body of chunks, and for the
wire client's own responses the stamps of when each chunk reached the socket.

`Response` is what any transport gives (`Pool.open`, `HttpxTransport.open`); `Stamps` is what a
response read by the wire client offers on top (`Response.stamps`, None elsewhere): each chunk's
arrival time on the pool's clock and its doubt, and a consumer that takes each read as it is
parsed, in the read callback, instead of being woken for every chunk (`on_read`), and gives
the connection back to the pool at the body's end there (`hand_back`).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from workloadlang.wire.exceptions import ProtocolError

if TYPE_CHECKING:
    from workloadlang.wire.connection import Connection


class Headers:
    """Response headers as received: `raw` (name, value) byte pairs in order; `get` by name,
    case-insensitive, as text (the first of several)."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw

    def get(self, name: str, default: str = "") -> str:
        key = name.lower().encode("ascii")
        for k, v in self.raw:
            if k.lower() == key:
                return v.decode("latin-1")
        return default

    def __contains__(self, name: str) -> bool:
        key = name.lower().encode("ascii")
        return any(k.lower() == key for k, _ in self.raw)


class Stamps(Protocol):
    """What a response read by the wire client tells of its chunks, and how its reader may take
    them (see `StampedResponse`)."""

    clock: Callable[[], float]
    arrival: float | None
    doubt: float

    def on_read(self, hook: Callable[[], bool]) -> None: ...

    def ended(self) -> bool: ...

    def queued(self) -> Iterator[bytes]: ...

    def hand_back(self) -> bool: ...

    def read_on_loop(self) -> None: ...

    def at_end(self) -> bool: ...


class Response(Protocol):
    """A response whose body is still streaming: iterate `body()` for its chunks (decoded when
    the server encoded them), close it with `aclose()` (always)."""

    status: int
    headers: Headers
    stamps: Stamps | None

    def body(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class StampedResponse:
    """A response read from a wire `Connection`. Iterating yields the body chunk by chunk (one
    per socket read); `arrival` is the stamp of the chunk last yielded. Closing it hands the
    connection back to the pool (`release`) when the body was read to its end, else closes
    it."""

    def __init__(self, conn: Connection, release: Callable[[Connection], None],
                 timeout: float | None) -> None:
        head = conn.head
        assert head is not None
        self.status, self.reason, self.headers = head.status, head.reason, Headers(head.headers)
        self._conn, self._release, self._timeout = conn, release, timeout
        self.clock = conn.clock
        self.arrival: float | None = None
        self.doubt = 0.0  # how much earlier than `arrival` the chunk last yielded may have begun
        self._closed = False
        self._handed_back = False
        encoding = self.headers.get("content-encoding").strip().lower()
        self.encoding = "" if encoding == "identity" else encoding
        # a body the server encoded is decoded as it is iterated; its reads are not taken raw
        self.stamps: Stamps | None = None if self.encoding else self

    def body(self) -> AsyncIterator[bytes]:
        return _decoded(self, self.encoding) if self.encoding else self

    def on_read(self, hook: Callable[[], bool]) -> None:
        """From now on, call `hook` on the loop after each read of the body is parsed (in the
        connection's read callback) instead of waking the body's reader: the hook takes what
        is queued (`queued`), may `hand_back` the connection at the body's end (`ended`), and
        returns True when the reader must be woken (it has something to do). It must not
        raise (if it does, the reader raises the same exception). A read that fails wakes the
        reader as usual."""
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
        conn.reset()
        self._release(conn)
        return True

    def read_on_loop(self) -> None:
        """What needed each packet's own arrival (the first tokens) has been read: read the rest
        on the event loop (`Connection.read_on_loop`)."""
        if not self._handed_back:
            self._conn.read_on_loop()

    def __aiter__(self) -> StampedResponse:
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
            conn.reset()
            self._release(conn)
        else:
            conn.close()


_MAX_DECODED = 1 << 20  # decoded bytes per step: a small compressed chunk may expand a lot


async def _decoded(chunks: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    """Yield the body decoded (`gzip`, `deflate`), at most `_MAX_DECODED` bytes a step (the
    reader bounds the total). Raises ProtocolError for another encoding or a corrupt body."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ProtocolError(f"the server encoded the body as {encoding!r}, which is not "
                            "decoded here (no encoding was asked for)")
    wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    try:
        async for chunk in chunks:
            data = decoder.decompress(chunk, _MAX_DECODED)
            while data:
                yield data
                data = decoder.decompress(decoder.unconsumed_tail, _MAX_DECODED)
        rest = decoder.flush()
    except zlib.error as exc:
        raise ProtocolError(f"the {encoding} body does not decode: {exc}") from None
    if rest:
        yield rest
