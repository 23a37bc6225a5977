"""The simulator's HTTP surface: a starlette ASGI app over one `Simulator`.

Input: HTTP requests (OpenAI-compatible chat completions, /tokenize, /metrics, admin).
Output: JSON bodies, SSE streams (`data: {...}` chunks then `data: [DONE]`) and Prometheus text.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import AsyncIterator
from functools import lru_cache
from time import perf_counter
from typing import Any

import anyio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .config import SimConfig
from .engine import ApiError, Job, Simulator
from .tokenizer import MessageError, render_tokens, text_tokens, token_ids

_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


MIN_BODY_BYTES = 16 * 1024 * 1024
"""A request body may be this large, or 64 bytes per token of the context limit if more."""
BODY_IDLE_S = 10.0
"""How long the server waits for the next bytes of a request body before answering 408."""
MAX_JSON_DEPTH = 64
"""Levels of JSON objects and arrays in a body (a chat request has 5)."""


def body_limit(config: SimConfig) -> int:
    """The largest request body accepted (413 beyond): room for a whole context of text."""
    return max(MIN_BODY_BYTES, 64 * config.max_model_len)


async def read_json(request: Request, limit: int, idle_s: float) -> Any:
    """The request's body as JSON. Raises ApiError: 413 past `limit` bytes, 408 when no bytes
    come for `idle_s` seconds (a Content-Length larger than the body sent), 400 when the client
    closes the connection before the body's end (the answer goes nowhere) or for a body that
    is not JSON, holds NaN or Infinity or a number too large for a float, or nests deeper than
    `MAX_JSON_DEPTH`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {int(declared):,} bytes is over the limit of "
                       f"{limit:,}", "BadRequestError")
    parts, size = [], 0
    with _Deadline(idle_s) as deadline:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"request body over the limit of {limit:,} bytes",
                                   "BadRequestError")
                parts.append(chunk)
                deadline.restart()
        except ClientDisconnect:  # an answer nobody reads, not a traceback in the server's log
            raise ApiError(400, f"the client closed the connection after {size:,} bytes of its "
                           "body", "BadRequestError") from None
    return _decode(b"".join(parts))


class _Deadline:
    """Cancels the current task when `restart` is not called for `seconds`, and turns that
    cancellation into ApiError 408. One timer per request, reset per chunk: cheaper than
    `asyncio.wait_for` around each read, which would add to the simulated TTFT."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.expired = seconds, False
        self.task = asyncio.current_task()
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None

    def restart(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(self.seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        if self.task is not None:
            self.task.cancel()

    def __enter__(self) -> _Deadline:
        self.restart()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if kind is asyncio.CancelledError and self.expired:
            if hasattr(self.task, "uncancel"):  # Python 3.11+: the task is not being cancelled
                self.task.uncancel()  # type: ignore[union-attr]
            raise ApiError(408, f"no request body bytes for {self.seconds:g} s",
                           "BadRequestError") from None


def _decode(raw: bytes) -> Any:
    try:
        body = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ApiError(400, "request body nests too deeply", "BadRequestError") from None
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {str(exc)[:200]}",
                       "BadRequestError") from None
    if _depth(body) > MAX_JSON_DEPTH:
        raise ApiError(400, f"request body nests more than {MAX_JSON_DEPTH} levels deep",
                       "BadRequestError")
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _depth(value: Any) -> int:
    """Levels of nested arrays and objects (iterative: the body was already parsed)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) \
            else None
        if children is not None:
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((child, depth + 1) for child in children)
    return deepest


@lru_cache(maxsize=1 << 14)
def _json_str(text: str) -> str:
    return json.dumps(text)


class ChunkWriter:
    """Formats the SSE chunks of one job; per-token chunks are two cached string halves."""

    def __init__(self, job: Job, model: str) -> None:
        self.job = job
        head = (f'{{"id":"{job.id}","object":"chat.completion.chunk","created":{job.created},'
                f'"model":{_json_str(model)},"choices":')
        self.head = head
        self.pre = {kind: f'data: {head}[{{"index":0,"delta":{{"{key}":'
                    for kind, key in (("reasoning", "reasoning_content"), ("content", "content"))}
        self.post = '},"finish_reason":null}]}\n\n'
        self.count = {"reasoning": 0, "content": 0}

    def token(self, kind: str, word: str) -> bytes:
        """One chunk carrying one token (space-prefixed after the first of its kind)."""
        n = self.count[kind]
        self.count[kind] = n + 1
        return (self.pre[kind] + _json_str(" " + word if n else word) + self.post).encode()

    def role(self) -> bytes:
        return (f'data: {self.head}[{{"index":0,"delta":{{"role":"assistant","content":""}},'
                f'"finish_reason":null}}]}}\n\n').encode()

    def _obj(self, choices: list, **extra: Any) -> bytes:
        body = json.loads(self.head + "[]}")
        body["choices"] = choices
        body.update(extra)
        return f"data: {_DUMPS(body)}\n\n".encode()

    def tail(self) -> list:
        """Finish chunk, optional usage chunk (timings on the last one), then [DONE]."""
        job = self.job
        finish = [{"index": 0, "delta": {}, "finish_reason": job.finish_reason}]
        timings = job.timings()
        extra = {} if timings is None else {"timings": timings}
        if job.include_usage:
            out = [self._obj(finish), self._obj([], usage=job.usage(), **extra)]
        else:
            out = [self._obj(finish, **extra)]
        return out + [b"data: [DONE]\n\n"]


class SimStream(StreamingResponse):
    """A StreamingResponse that always settles its job, even when the client disconnects."""

    def __init__(self, sim: Simulator, job: Job, body: AsyncIterator[bytes]) -> None:
        super().__init__(body, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.sim, self.job = sim, job

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            self.sim.finalize(self.job)


async def _sse(sim: Simulator, job: Job) -> AsyncIterator[bytes]:
    """SSE bytes for a job: one event per token; events ready together share one write."""
    writer = ChunkWriter(job, sim.config.model)
    first, key = True, job.request_id or job.id
    async for batch in sim.run(job):
        parts = [writer.token(kind, word) for kind, word in batch]
        if first:
            parts.insert(0, writer.role())
        yield b"".join(parts)
        written = perf_counter()  # resumed once the server wrote the chunk to the socket
        sim.emissions.wrote(key, len(batch), written)
        if first:
            first = False
            job.t_first_written = written
    yield b"".join(writer.tail())


def _completion_body(sim: Simulator, job: Job) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": " ".join(job.content)}
    if job.reasoning:
        message["reasoning_content"] = " ".join(job.reasoning)
    body = {
        "id": job.id, "object": "chat.completion", "created": job.created,
        "model": sim.config.model,
        "choices": [{"index": 0, "message": message, "finish_reason": job.finish_reason}],
        "usage": job.usage(), "timings": job.timings(),
    }
    if body["timings"] is None:
        del body["timings"]
    return body


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _drain(sim: Simulator, job: Job) -> None:
    async for _ in sim.run(job):
        pass


async def _non_streaming(sim: Simulator, job: Job, receive) -> Response:
    """Run a job to completion, cancelling it if the client disconnects first."""
    work = asyncio.ensure_future(_drain(sim, job))
    watch = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
        await asyncio.gather(work, watch, return_exceptions=True)
        sim.finalize(job)
    if work.cancelled():
        return Response(status_code=499)
    if work.exception() is not None:
        raise work.exception()  # type: ignore[misc]
    return JSONResponse(_completion_body(sim, job))


class _Collector:
    """Exposes the simulator's counters and gauges at scrape time."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def collect(self):
        sim, c = self.sim, self.sim.counters
        snap = sim.cache.snapshot()
        yield CounterMetricFamily("vllm:prefix_cache_queries", "Prefix-cache queried tokens.",
                                  value=c.query_tokens)
        yield CounterMetricFamily("vllm:prefix_cache_hits", "Prefix-cache hit tokens.",
                                  value=c.hit_tokens)
        yield CounterMetricFamily("vllm:prompt_tokens", "Prompt tokens.", value=c.query_tokens)
        yield CounterMetricFamily("vllm:generation_tokens", "Generated tokens.",
                                  value=c.generation_tokens)
        yield GaugeMetricFamily("vllm:num_requests_running", "Requests in a slot.",
                                value=sim.active)
        yield GaugeMetricFamily("vllm:num_requests_waiting", "Requests queued.",
                                value=sim.slots.waiting)
        for name in ("requests", "completed", "aborted", "cancelled", "rejected",
                     "errors_injected", "computed_tokens", "host_restored_tokens",
                     "concurrency_evictions"):
            yield CounterMetricFamily(f"wlsim_{name}", f"Simulator {name}.",
                                      value=getattr(c, name))
        for name, value in snap["counters"].items():
            yield CounterMetricFamily(f"wlsim_blocks_{name}", f"Cache blocks {name}.",
                                      value=value)
        for name in ("used_tokens", "capacity_tokens", "blocks", "pinned_blocks",
                     "host_used_tokens", "host_capacity_tokens", "host_blocks"):
            yield GaugeMetricFamily(f"wlsim_cache_{name}", f"Cache {name}.", value=snap[name])


def create_app(config: SimConfig, body_idle_s: float = BODY_IDLE_S) -> Starlette:
    """Build the ASGI app for one simulator instance. Output: a Starlette app whose `state.sim`
    is the `Simulator`. A request body is bounded (`body_limit`, 413) and must keep coming
    (`body_idle_s`, 408)."""
    sim = Simulator(config)
    limit = body_limit(config)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(sim))  # type: ignore[arg-type]

    async def chat(request: Request) -> Response:
        # the request's first bytes were read (StampedHttpProtocol), else its body was received
        arrival = request.scope.get("wl.received") or perf_counter()
        try:
            body = await read_json(request, limit, body_idle_s)
        except ApiError as exc:
            sim.counters.requests += 1
            sim.counters.rejected += 1
            return _error(exc)
        headers = request.headers
        try:
            job = sim.prepare(body, headers.get("x-wl-session"), headers.get("x-wl-request"),
                              arrival)
        except ApiError as exc:
            return _error(exc)
        if job.stream:
            return SimStream(sim, job, _sse(sim, job))
        return await _non_streaming(sim, job, request.receive)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": config.model, "object": "model", "created": 0,
            "owned_by": "workloadlang-sim", "max_model_len": config.max_model_len,
        }]})

    async def props(request: Request) -> Response:
        # llama.cpp's shape, plus what llama.cpp leaves to the slot count: each request's
        # prefill time (`timings.prompt_ms`) is modelled for it alone, its slots sharing no
        # batches, so it holds none of the other requests' work (`discover.prefill_own`)
        return JSONResponse({"total_slots": config.slots, "prefill_time": "own",
                             "default_generation_settings": {"n_ctx": config.max_model_len}})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def tokenize(request: Request) -> Response:
        try:
            tokens = _tokenize_body(await read_json(request, limit, body_idle_s))
        except ApiError as exc:
            return _error(exc)
        except (ValueError, MessageError) as exc:
            return _error(ApiError(400, f"bad tokenize request: {exc}", "BadRequestError"))
        return JSONResponse({"tokens": token_ids(tokens), "count": len(tokens),
                             "max_model_len": config.max_model_len})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def state(request: Request) -> Response:
        return JSONResponse(sim.state())

    async def emissions(request: Request) -> Response:
        return JSONResponse({"clock": "perf_counter", "requests": sim.emissions.snapshot()})

    async def reset(request: Request) -> Response:
        removed = sim.reset()
        return JSONResponse({"removed_blocks": removed, **sim.state()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        # Warm-up: the first task group loads anyio's backend (~30 ms), which would otherwise
        # land on the first streamed request's TTFT.
        async with anyio.create_task_group():
            pass
        # Keep the startup heap (modules, app) out of the collector's scans: a full collection
        # walking it paused the server 16-31 ms mid-run, TTFT jitter the modelled engine lacks.
        gc.collect()
        gc.freeze()
        yield

    app = Starlette(lifespan=lifespan, routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/props", props, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/sim/state", state, methods=["GET"]),
        Route("/sim/reset", reset, methods=["POST"]),
        Route("/sim/emissions", emissions, methods=["GET"]),
    ])
    app.state.sim = sim
    return app


def _tokenize_body(body: Any) -> list:
    """Tokens for a /tokenize body: `messages` (templated), `prompt` or `content` (plain)."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if "messages" in body:
        return render_tokens(body["messages"], bool(body.get("add_generation_prompt", True)))
    for key in ("prompt", "content"):
        if isinstance(body.get(key), str):
            return text_tokens(body[key])
    raise ValueError("expected 'prompt', 'content' or 'messages'")
