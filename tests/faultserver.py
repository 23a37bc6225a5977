"""A real loopback fault server for transport tests: a small starlette app served by uvicorn in a
background thread on 127.0.0.1 (a free port), misbehaving on request.

Use the `fault_server` fixture (import it into a test module) or `FaultServer()` as a context
manager. The chat route picks its behaviour from the `X-Fault` request header and identifies the
request by `X-WL-Request`; the server records every request's headers and body, how many token
chunks it sent, and — as a `threading.Event` per request id — whether it saw the client disconnect.

Scenarios (`X-Fault`): ok, nospace, pings, http500, http429, echo_auth (HTTP 401 whose message
repeats the Authorization header), cut, malformed, engine_error, stall, slow (one token every
`X-Interval-Ms`, up to `X-Tokens`), prefill (sleeps before any byte), linger (after `[DONE]`,
keeps the stream open with comment lines for 5 s), cut_after_done (breaks the connection right
after `[DONE]`, without ending the chunked body).
Hostile engines (`X-Fault`), each answer impossible or unbounded: cached_over (cached tokens
10^12 of a 100-token prompt), cached_negative (-555), prompt_huge (a prompt of 10^12 tokens,
cached one less), completion_negative, flood (ignores `max_tokens`: `X-Tokens` token events as
fast as it can), fat_tokens (each token event carries `X-Bytes` bytes), huge_json (a
non-streamed JSON answer of `X-Bytes` bytes), no_newline (an SSE body of `X-Bytes` bytes without
a line break), echo_key (the Authorization header it got, repeated in the reply's text (whole,
cut, and its last 10 characters), its reasoning and its finish_reason), stall_body (a chunked body that promises more and sends
nothing after its first token, as `stall` but without any keep-alive).
`/v1/models` answers `models_status` / `models_body` (settable); `models_echo_key` makes it list
the Authorization header it got as the model id; `models_bytes` pads its answer to that many
bytes; `/metrics` answers `metrics_text`; `/tokenize` answers both the vLLM and llama.cpp request
shapes.

For clients that cannot set headers (the `wl run` CLI), `defaults` supplies header values a chat
request lacks (e.g. `{"x-fault": "http500"}` or `{"x-tokens": "3", "x-interval-ms": "50"}`), and
`fault_for` (a callable `(request_id, body) -> fault name | {header: value} | None`) can pick
them per request (request headers win, then `fault_for`, then `defaults`).
Every chat request is also timed: `spans[request_id] = (start, end)` on `time.monotonic()`, from
its arrival to the end of its response — marked just BEFORE the final `[DONE]` is written (so a
client cannot have finished the request earlier), else when the response stops; `inflight` /
`max_inflight` count chat requests in progress by the same marks; a chat request's log entry has
the client's source port as `peer` (one port = one reused connection). `/tokenize` answers HTTP 500
once it has answered `tokenize_fail_after` times (None: never). `/v1/models` requests are
logged in `requests` too (path `/v1/models`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

DEFAULT_MODELS = {"object": "list", "data": [{"id": "fault-model", "owned_by": "vllm", "max_model_len": 4096}]}


def chunk(content: str | None = None, reasoning: str | None = None, finish: str | None = None) -> dict[str, Any]:
    """Output: one OpenAI chat-completion chunk."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage_chunk(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """Output: the final include_usage chunk (llama.cpp shape, with timings)."""
    return {
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached}},
        "timings": {"cache_n": cached, "prompt_n": prompt - cached, "prompt_ms": 12.5},
    }


def sse(obj: Any, sep: bytes = b"data: ") -> bytes:
    """Output: one SSE event carrying `obj` (JSON-encoded unless bytes)."""
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return sep + payload + b"\n\n"


class FaultServer:
    """The server and what it observed. `base_url` is `http://127.0.0.1:PORT/v1`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.sent: dict[str, int] = defaultdict(int)
        self._disconnects: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.models_status = 200
        self.models_body: Any = DEFAULT_MODELS
        self.models_echo_key = False
        self.models_bytes = 0
        self.metrics_text = ""
        self.props: dict[str, Any] | None = None
        self.tokenize_shapes = ("prompt", "content")
        self.tokenize_calls = 0
        self.tokenize_fail_after: int | None = None
        self.defaults: dict[str, str] = {}
        self.fault_for: Any = None
        self.spans: dict[str, tuple[float, float | None]] = {}
        self.inflight = 0
        self.max_inflight = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.root_url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.root_url + "/v1"
        config = uvicorn.Config(build_app(self), log_level="critical", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def disconnected(self, request_id: str) -> threading.Event:
        """Output: the event set when the server saw request `request_id`'s client go away."""
        with self._lock:
            return self._disconnects.setdefault(request_id, threading.Event())

    def chat_requests(self) -> list[dict[str, Any]]:
        """Output: the logged chat requests, in arrival order."""
        return [r for r in self.requests if r["path"] == "/v1/chat/completions"]

    def reset(self) -> None:
        """Forget what was observed and restore the default behaviour (between tests)."""
        self.requests.clear()
        self.sent.clear()
        self.spans.clear()
        self.defaults = {}
        self.fault_for = None
        self.max_inflight = 0
        self.tokenize_calls, self.tokenize_fail_after = 0, None
        self.props, self.tokenize_shapes, self.metrics_text = None, ("prompt", "content"), ""
        self.models_status, self.models_body = 200, DEFAULT_MODELS
        self.models_echo_key, self.models_bytes = False, 0

    def _begin(self, rid: str) -> Any:
        """Mark a chat request's arrival. Output: an idempotent callable marking its end."""
        start = time.monotonic()
        with self._lock:
            self.spans[rid] = (start, None)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        ended = []

        def end() -> None:
            with self._lock:
                if not ended:
                    ended.append(True)
                    self.spans[rid] = (start, time.monotonic())
                    self.inflight -= 1
        return end

    def start(self) -> FaultServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fault server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build_app(server: FaultServer) -> Starlette:
    """Output: the starlette app whose behaviour is driven by `server`'s settings."""

    async def models(request: Request) -> Response:
        server.requests.append({"path": "/v1/models", "headers": dict(request.headers)})
        if server.models_echo_key or server.models_bytes:
            return _hostile_models(server, request)
        if server.models_status >= 400 or not isinstance(server.models_body, (dict, list)):
            body = server.models_body if isinstance(server.models_body, str) else json.dumps(server.models_body)
            return Response(body, status_code=server.models_status, media_type="application/json")
        return JSONResponse(server.models_body, status_code=server.models_status)

    async def metrics(request: Request) -> Response:
        server.requests.append({"path": "/metrics", "headers": dict(request.headers)})
        return PlainTextResponse(server.metrics_text)

    async def props(request: Request) -> Response:
        if server.props is None:
            return JSONResponse({"error": {"message": "not found"}}, status_code=404)
        return JSONResponse(server.props)

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        server.tokenize_calls += 1
        if server.tokenize_fail_after is not None and server.tokenize_calls > server.tokenize_fail_after:
            return JSONResponse({"error": {"message": "tokenizer crashed"}}, status_code=500)
        if "prompt" in body and "prompt" in server.tokenize_shapes:
            ids = list(range(len(body["prompt"].split())))
            return JSONResponse({"count": len(ids), "tokens": ids, "max_model_len": 4096})
        if "content" in body and "content" in server.tokenize_shapes:
            return JSONResponse({"tokens": list(range(len(body["content"].split())))})
        return JSONResponse({"error": {"message": "bad tokenize request"}}, status_code=400)

    async def chat(request: Request) -> Response:
        body = await request.json()
        rid = request.headers.get("x-wl-request", "?")
        end = server._begin(rid)
        server.requests.append({"path": "/v1/chat/completions", "headers": dict(request.headers), "body": body, "id": rid,
                                "peer": request.client.port if request.client else None})
        chosen = server.fault_for(rid, body) if server.fault_for else None
        opts = dict(server.defaults)
        opts.update(chosen if isinstance(chosen, dict) else {"x-fault": chosen} if chosen else {})
        opts.update({k: v for k, v in request.headers.items()
                     if k in ("x-fault", "x-tokens", "x-interval-ms", "x-bytes")})
        request.state.wl_opts = opts
        fault = opts.get("x-fault", "ok")
        try:
            response = await respond(server, request, rid, fault)
        except BaseException:
            end()
            raise
        if isinstance(response, StreamingResponse):
            response.body_iterator = _ended(response.body_iterator, end)
        else:
            end()
        return response

    return Starlette(routes=[
        Route("/v1/models", models),
        Route("/metrics", metrics),
        Route("/props", props),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ])


async def respond(server: FaultServer, request: Request, rid: str, fault: str) -> Response:
    """Output: the response for scenario `fault`."""
    if fault == "http500":
        return JSONResponse({"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}}, status_code=500)
    if fault == "http429":
        return JSONResponse({"error": {"message": "too many requests, slow down", "type": "rate_limit"}}, status_code=429)
    if fault == "echo_auth":  # a careless gateway: its error repeats the credential it got
        auth = request.headers.get("authorization", "")
        return JSONResponse({"error": {"message": f"invalid credential {auth}", "type": "auth"}}, status_code=401)
    if fault == "prefill":
        return await _prefill(server, request, rid)
    opts = getattr(request.state, "wl_opts", {})
    if fault in HOSTILE:
        return HOSTILE[fault](request, opts)
    tokens = int(opts.get("x-tokens", "5"))
    interval = float(opts.get("x-interval-ms", "0")) / 1000
    gen = _events(server, request, rid, fault, tokens, interval)
    return StreamingResponse(gen, media_type="text/event-stream")


def _hostile_models(server: FaultServer, request: Request) -> Response:
    """/v1/models listing the Authorization header it got as the model id, padded to
    `models_bytes`."""
    mid = request.headers.get("authorization", "m") if server.models_echo_key else "fault-model"
    body = {"object": "list", "data": [{"id": mid, "owned_by": "vllm", "max_model_len": 4096}]}
    if server.models_bytes:
        body["padding"] = "x" * server.models_bytes
    return JSONResponse(body)


def _usage_stream(prompt: int, cached: int, completion: int = 3) -> StreamingResponse:
    """A clean three-token answer whose usage carries the counts given."""
    async def gen() -> AsyncIterator[bytes]:
        for i in range(3):
            yield sse(chunk(content=f"t{i} "))
        yield sse(chunk(finish="stop"))
        yield sse({"choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}})
        yield b"data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")


def _flood(request: Request, opts: dict[str, str]) -> Response:
    tokens, fat = int(opts.get("x-tokens", "100000")), int(opts.get("x-bytes", "0"))
    piece = "x" * fat if fat else None

    async def gen() -> AsyncIterator[bytes]:
        for i in range(tokens):
            if i % 64 == 0:  # let the loop see a disconnect (writes to a closed socket do not wait)
                await asyncio.sleep(0)
                if await request.is_disconnected():
                    return
            yield sse(chunk(content=piece or f"t{i} "))
        yield sse(chunk(finish="stop"))
        yield b"data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")


def _huge_json(request: Request, opts: dict[str, str]) -> Response:
    size = int(opts.get("x-bytes", str(20 << 20)))

    async def gen() -> AsyncIterator[bytes]:
        yield b'{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"'
        for _ in range(size // 65536):
            await asyncio.sleep(0)
            if await request.is_disconnected():
                return
            yield b"a" * 65536
        yield b'"}}],"usage":{"prompt_tokens":100,"completion_tokens":3}}'
    return StreamingResponse(gen(), media_type="application/json")


def _no_newline(request: Request, opts: dict[str, str]) -> Response:
    size = int(opts.get("x-bytes", str(20 << 20)))

    async def gen() -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"index":0,"delta":{"content":"'
        for _ in range(size // 65536):
            await asyncio.sleep(0)
            if await request.is_disconnected():
                return
            yield b"a" * 65536
    return StreamingResponse(gen(), media_type="text/event-stream")


def _echo_key(request: Request, opts: dict[str, str]) -> Response:
    key = request.headers.get("authorization", "").removeprefix("Bearer ")

    async def gen() -> AsyncIterator[bytes]:
        yield sse(chunk(reasoning=f"the key is {key}"))
        for word in ("you", "sent", key, "as", "your", "key:", key[:-3], "ending",
                     f"...{key[-10:]}"):
            yield sse(chunk(content=f"{word} "))
        yield sse(chunk(finish=key))
        yield sse(usage_chunk(100, 8, 60))
        yield b"data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")


def _stall_body(request: Request, opts: dict[str, str]) -> Response:
    async def gen() -> AsyncIterator[bytes]:
        yield sse(chunk(content="t0 "))
        await _sleep_until_disconnect(request, 60)
    return StreamingResponse(gen(), media_type="text/event-stream")


HOSTILE = {
    "cached_over": lambda r, o: _usage_stream(100, 10**12),
    "cached_negative": lambda r, o: _usage_stream(100, -555),
    "prompt_huge": lambda r, o: _usage_stream(10**12, 10**12 - 1),
    "completion_negative": lambda r, o: _usage_stream(100, 60, -7),
    "flood": _flood, "fat_tokens": _flood, "huge_json": _huge_json, "no_newline": _no_newline,
    "echo_key": _echo_key, "stall_body": _stall_body,
}


async def _ended(body: AsyncIterator[bytes], end: Any) -> AsyncIterator[bytes]:
    """The streamed body, marking the request's end before `[DONE]` goes out, else however it
    stops (cut or disconnect)."""
    try:
        async for part in body:
            if part.rstrip().endswith(b"[DONE]"):
                end()
            yield part
    finally:
        end()
        await body.aclose()  # type: ignore[attr-defined]  # run the inner generator's cleanup now


async def _prefill(server: FaultServer, request: Request, rid: str) -> Response:
    """Sleep before sending anything (a long prefill), noticing a client disconnect."""
    for _ in range(1000):
        if await request.is_disconnected():
            server.disconnected(rid).set()
            return Response(status_code=499)
        await asyncio.sleep(0.01)
    return JSONResponse({"error": {"message": "prefill test was never cancelled"}}, status_code=500)


async def _events(server: FaultServer, request: Request, rid: str, fault: str, tokens: int, interval: float) -> AsyncIterator[bytes]:
    """The SSE body for the streaming scenarios; records the chunks sent and a disconnect."""
    sep = b"data:" if fault == "nospace" else b"data: "
    completed = False
    try:
        if fault == "pings":
            yield b": ping\n\n"
        yield sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}, sep)
        for i in range(tokens):
            if fault == "cut" and i == tokens // 2:
                raise RuntimeError("simulated crash mid-stream")
            if fault == "malformed" and i == 1:
                yield b'data: {"choices": [{"delta": {"content": "x"\n\n'
            if fault == "engine_error" and i == 2:
                yield sse({"error": {"message": "KV cache exhausted", "type": "server_error"}}, sep)
                completed = True
                return
            if fault == "pings":
                yield b": keep-alive\n\nevent: message\n"
            yield sse(chunk(content=f"t{i} "), sep)
            server.sent[rid] += 1
            if fault == "stall" and i == 0:
                await _sleep_until_disconnect(request, 60)
            if interval:
                await asyncio.sleep(interval)
        yield sse(chunk(finish="stop"), sep)
        yield sse(usage_chunk(100, tokens, 60), sep)
        yield sep + b"[DONE]\n\n"
        if fault == "cut_after_done":
            raise RuntimeError("simulated crash right after [DONE]")
        if fault == "linger":  # keeps the stream open after [DONE]
            for _ in range(100):
                await asyncio.sleep(0.05)
                yield b": still here\n\n"
        completed = True
    finally:
        if not completed and fault != "cut":
            server.disconnected(rid).set()


async def _sleep_until_disconnect(request: Request, seconds: float) -> None:
    """Stall: send nothing for up to `seconds` (cancelled by starlette when the client leaves)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def fault_server() -> Any:
    """A running `FaultServer`, shared by the tests of one module."""
    with FaultServer() as server:
        yield server


def wl_command() -> list[str]:
    """Output: argv prefix of the installed `wl` entry point (next to this Python), else
    `python -m workloadlang.cli`."""
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("wl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "workloadlang.cli"]


def wl_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Output: this environment without any `*API_KEY*` variable (so a test controls exactly
    which credentials exist), with `env`'s entries added."""
    import os

    full = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
    full.update(env or {})
    return full


def run_wl(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run `wl ARGS` as a subprocess (a real process: real signal handling, real stderr), in
    `wl_env(env)`. Output: CompletedProcess with text stdout / stderr."""
    import subprocess

    return subprocess.run([*wl_command(), *args], capture_output=True, text=True,
                          env=wl_env(env), timeout=timeout)


def run_wl_here(*args: str, env: dict[str, str] | None = None) -> Any:
    """`wl ARGS` through the CLI's `main` in this process, for tests about what a run records,
    prints and exits with (not about the process: signals, imports, memory; those use
    `run_wl`). The environment is `wl_env(env)`, for the call only (`TMPDIR` included: the
    temporary directory is looked up again). Output: a CompletedProcess with
    text stdout / stderr."""
    import contextlib
    import io
    import os
    import subprocess
    import tempfile

    from workloadlang.cli.main import main

    saved, saved_tmp, full = dict(os.environ), tempfile.tempdir, wl_env(env)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(full)
        tempfile.tempdir = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's usage errors, as the process would exit
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        tempfile.tempdir = saved_tmp
    return subprocess.CompletedProcess(["wl", *args], code, out.getvalue(), err.getvalue())
