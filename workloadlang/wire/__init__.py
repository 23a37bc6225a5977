"""The wire client: the project's own HTTP/1.1 client, built to measure (docs/architecture.md,
"The wire client").

- `Pool`: plain `http://` connections, an O(1) idle stack per origin, every body chunk stamped
  with when it reached the socket (the kernel's receive stamp, read by a `Reader` thread),
  requests written ahead of their turn (`Pool.write_now`, `Pool.claim` for a run's start).
- `Reader`: the thread that reads stamped sockets; one per run, passed in (`Pool(reader)`),
  scheduled first while a request is timed alone (`Reader.alone`).
- `Outgoing`: a request as bytes (head once, the body as parts) and its state once written.
- `Response` / `Stamps`: what a response offers (`StampedResponse` from the pool; the https
  path's `HttpxResponse` has no stamps).
- `HttpxTransport`: the https path, through an `httpx.AsyncClient`.
- `transport_for(url, pool, client)`: the transport a URL's scheme goes through.
- Errors: `workloadlang.wire.exceptions` (its docstring draws the tree).
"""

from __future__ import annotations

from typing import Protocol

import httpx

from workloadlang.wire.adapter import HttpxResponse, HttpxTransport
from workloadlang.wire.exceptions import (
    ConnectError,
    ConnectionDropped,
    ConnectTimeout,
    ProtocolError,
    ReadError,
    ReadTimeout,
    WireError,
    WireTimeout,
    WriteError,
    WriteTimeout,
)
from workloadlang.wire.pool import Pool, StartWrites
from workloadlang.wire.reader import Reader
from workloadlang.wire.request import Outgoing, content_length, request_head, target_of
from workloadlang.wire.response import Headers, Response, StampedResponse, Stamps


class Transport(Protocol):
    """What sends an `Outgoing` and gives its `Response`: a `Pool` or an `HttpxTransport`."""

    async def open(self, out: Outgoing) -> Response: ...


def transport_for(url: str, pool: Pool | None, client: httpx.AsyncClient) -> Transport:
    """Output: `pool` for an http:// URL (when there is one), else `client` through
    `HttpxTransport` (https://, or no pool)."""
    if pool is not None and target_of(url).scheme == "http":
        return pool
    return HttpxTransport(client)


__all__ = [
    "ConnectError", "ConnectTimeout", "ConnectionDropped", "Headers", "HttpxResponse",
    "HttpxTransport", "Outgoing", "Pool", "ProtocolError", "ReadError", "ReadTimeout", "Reader",
    "Response", "StampedResponse", "Stamps", "StartWrites", "Transport", "WireError",
    "WireTimeout", "WriteError", "WriteTimeout", "content_length", "request_head", "target_of",
    "transport_for",
]
