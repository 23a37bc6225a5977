"""The link to an engine: what discovery found and the connections a run talks through.

Input: the engine's OpenAI base URL, an API key (or None) and what the user declared (model,
context limit, whether the engine leaves out a zero cached count, the idle timeout). Output:
`EngineLink` (`open_link`): the `Endpoint`, the discovered `EngineInfo`, the engine's tokenizer,
and the connections:

- `side`: the side calls (discovery, the engine's counters, its tokenizer) on connections of
  their own (`side.py`): a wire pool read on the loop for an http:// engine, an httpx client of
  their own for https://. They never pass through, scan or take the connections the run's
  chat requests go through;
- `http`: an `httpx.AsyncClient` for the chat requests of an https:// engine
  (`HttpxTransport`);
- `pool`: the wire client's pool for the chat requests of an http:// engine, with its `reader`
  thread (one per link: two runs in one process never share one).

`pacing()` is how the run's bytes leave: `WriteAhead` over the pool, else `InTurn` over https.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from pydantic import SecretStr

from workloadlang.resultsmodels import EngineSummary
from workloadlang.run.ahead import WriteAhead
from workloadlang.run.discover import EngineInfo, Tokenizer, discover
from workloadlang.run.endpoint import Endpoint
from workloadlang.run.pacing import InTurn, Pacing
from workloadlang.run.side import HttpxSide, Side, WireSide
from workloadlang.wire import Pool, Transport, transport_for

KEEPALIVE_S = 1.0
"""Pooled connections are dropped after this long idle: servers close idle keep-alive
connections (llama.cpp and uvicorn after 5 s) and a request sent on one the server just closed
would fail."""


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
        transport, self.transport = self.transport, None
        if transport is not None:
            await transport.aclose()


def make_http_client(keepalive_expiry: float = KEEPALIVE_S) -> httpx.AsyncClient:
    """Output: the httpx client of a link: no client-wide timeout (each call sets its own),
    its transport made on the first request."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1024,
                          keepalive_expiry=keepalive_expiry)
    return httpx.AsyncClient(timeout=httpx.Timeout(None), transport=LazyTransport(
        lambda: httpx.AsyncHTTPTransport(limits=limits)))


class EngineLink:
    """See the module. Made by `open_link`, closed when its block ends."""

    def __init__(self, endpoint: Endpoint, info: EngineInfo, http: httpx.AsyncClient,
                 pool: Pool | None, tokenizer: Tokenizer | None, sim: bool = False,
                 side: Side | None = None) -> None:
        self.endpoint, self.info, self.http, self.pool = endpoint, info, http, pool
        self.tokenizer, self.sim = tokenizer, sim
        self.side: Side = side if side is not None else HttpxSide(http)
        self.reader = pool.reader if pool is not None else None

    @property
    def chat(self) -> Transport:
        """The transport chat requests go through."""
        return transport_for(self.endpoint.chat_url, self.pool, self.http)

    def pacing(self) -> Pacing:
        """A fresh pacing for one run: `WriteAhead` over the wire pool, else `InTurn`."""
        return WriteAhead(self.pool) if self.pool is not None else InTurn(self.chat)

    def alone(self, on: bool) -> None:
        """One request is in flight, timed alone (see `Reader.alone`)."""
        if self.reader is not None:
            self.reader.alone(on)

    def engine_summary(self) -> EngineSummary:
        """Output: the results' `engine` (`engine_fields`, typed)."""
        return EngineSummary.model_validate(self.engine_fields())

    def engine_fields(self) -> dict[str, Any]:
        """Output: the results' `engine`: where, which model and engine, what discovery found."""
        info = self.info
        return {"base_url": self.endpoint.base_url, "model": info.model, "engine": info.engine,
                "max_context": info.max_context, "max_context_source": info.max_context_source,
                "tokenizer": info.tokenize_style, "notes": info.notes, "sim": self.sim,
                "slots": info.slots, "prefill_own": info.prefill_own}


@asynccontextmanager
async def open_link(base_url: str, api_key: SecretStr | None = None, *, model: str | None = None,
                    max_context: int | None = None, cached_zero_when_absent: bool = False,
                    idle_timeout_s: float | None = 60.0,
                    sim: bool = False) -> AsyncIterator[EngineLink]:
    """Discover the engine at `base_url` and keep the connections to it open while the block
    runs (`sim`: it is the embedded simulator, started for this run). Raises `EndpointError`
    when the engine cannot be used."""
    base = base_url.rstrip("/")
    side = side_client(base)
    async with make_http_client() as http:
        try:
            info = await discover(side, base, api_key, model=model, max_context=max_context)
            endpoint = Endpoint(base_url=base, model=info.model, api_key=api_key,
                                cached_zero_when_absent=cached_zero_when_absent,
                                idle_timeout_s=idle_timeout_s)
            pool = Pool(keepalive_expiry=KEEPALIVE_S) \
                if endpoint.chat_url.startswith("http://") else None  # it makes its own reader
            try:
                yield EngineLink(endpoint, info, http, pool,
                                 Tokenizer.from_info(side, info, api_key), sim, side)
            finally:
                if pool is not None:
                    await pool.aclose()
        finally:
            await side.aclose()


def side_client(base_url: str) -> Side:
    """Output: the side calls' client for an engine at `base_url` (see the module)."""
    if base_url.startswith("http://"):
        return WireSide(keepalive_expiry=KEEPALIVE_S)
    return HttpxSide(make_http_client())
