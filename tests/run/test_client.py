"""Unit tests of the streaming client with httpx.MockTransport: body/headers, SSE parsing, TTFT
on an injected clock, abort, early stop, malformed chunks, engine errors, cuts and cached-source
logic."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from workloadlang.run.client import send
from workloadlang.run.endpoint import ChatRequest, Endpoint, build_body, root_of
from workloadlang.run.sse import Outcome
from workloadlang.wire import HttpxTransport

MSGS = [{"role": "user", "content": "hi"}]


def ev(obj: Any, sep: bytes = b"data: ", end: bytes = b"\n\n") -> bytes:
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return sep + payload + end


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def finish(reason: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def usage(prompt: int = 50, completion: int = 3, **extra: Any) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **extra}}


DONE = b"data: [DONE]\n\n"


class Clock:
    """A fake monotonic clock the mock stream advances."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_send(
    pieces: list[bytes | tuple[float, bytes]],
    *,
    endpoint: Endpoint | None = None,
    status: int = 200,
    ctype: str = "text/event-stream",
    clock: Clock | None = None,
    seen: list[httpx.Request] | None = None,
    **req_fields: Any,
) -> Outcome:
    """Send one request to a mock server streaming `pieces`; a `(t, bytes)` piece first sets the
    fake clock to 100 + t."""
    clock = clock or Clock()

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            if isinstance(piece, tuple):
                clock.now = 100.0 + piece[0]
                piece = piece[1]
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(status, content=body(), headers={"content-type": ctype})

    fields = {"id": "r1", "messages": MSGS, "max_tokens": 8, **req_fields}
    ep = endpoint or Endpoint(base_url="http://engine/v1", model="m")

    async def go() -> Outcome:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await send(HttpxTransport(client), ep, ChatRequest(**fields), clock=clock, wallclock=lambda: 1.7e9)

    return asyncio.run(go())


# ---------------------------------------------------------------- body, headers, endpoint


def test_body_and_headers() -> None:
    seen: list[httpx.Request] = []
    ep = Endpoint(base_url="http://engine/v1/", model="m", api_key="sk-123")
    run_send(
        [ev(finish()), DONE], endpoint=ep, seen=seen,
        options={"seed": 7, "reasoning_effort": None, "cache_prompt": True},
        headers={"X-WL-Request": "main#1/3", "X-Conversation-Id": "resume-me"},
    )
    request = seen[0]
    assert str(request.url) == "http://engine/v1/chat/completions"
    body = json.loads(request.content)
    assert body == {
        "model": "m", "messages": MSGS, "max_tokens": 8, "stream": True,
        "stream_options": {"include_usage": True}, "seed": 7, "cache_prompt": True,
    }
    assert request.headers["authorization"] == "Bearer sk-123"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-wl-request"] == "main#1/3"
    assert "x-conversation-id" not in request.headers


def test_only_our_headers_and_no_cookies() -> None:
    """The engine sees the runner's headers only: no client default `Accept-Encoding` inviting a
    compressed stream, and no cookie carried from one answer to the next request."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=ev(finish()) + DONE,
                              headers={"content-type": "text/event-stream", "set-cookie": "s=1"})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            ep = Endpoint(base_url="http://engine/v1", model="m")
            for n in range(2):
                out = await send(HttpxTransport(client), ep, ChatRequest(id=f"r{n}", messages=MSGS, max_tokens=8))
                assert out.error is None

    asyncio.run(go())
    assert len(seen) == 2
    for request in seen:
        assert "accept-encoding" not in request.headers
        assert "cookie" not in request.headers
        assert request.headers["accept"] == "text/event-stream"
        assert request.headers["user-agent"].startswith("workloadlang/")


def test_no_auth_header_without_key() -> None:
    seen: list[httpx.Request] = []
    run_send([ev(finish()), DONE], seen=seen)
    assert "authorization" not in seen[0].headers


def test_api_key_never_serialised() -> None:
    ep = Endpoint(base_url="http://h/v1", model="m", api_key="sk-very-secret")
    for text in (repr(ep), str(ep), ep.model_dump_json(), json.dumps(ep.model_dump(mode="json"))):
        assert "sk-very-secret" not in text
    assert ep.auth_headers() == {"Authorization": "Bearer sk-very-secret"}


def test_root_url_removes_only_trailing_v1() -> None:
    assert root_of("http://h/v1/") == "http://h"
    assert root_of("http://h/v1/proxy/v1") == "http://h/v1/proxy"
    assert root_of("http://h/api") == "http://h/api"
    assert Endpoint(base_url="http://h/v1x/v1", model="m").root_url == "http://h/v1x"


def test_build_body_options_override_and_drop_none() -> None:
    ep = Endpoint(base_url="http://h/v1", model="m")
    req = ChatRequest(id="x", messages=MSGS, max_tokens=1, options={"max_tokens": None, "temperature": 0})
    body = build_body(ep, req)
    assert body["max_tokens"] == 1 and body["temperature"] == 0


# ---------------------------------------------------------------- SSE parsing and TTFT


def test_ttft_ignores_role_chunk_comments_and_usage() -> None:
    out = run_send([
        (0.010, b": ping\n\n"),
        (0.020, ev(delta(role="assistant", content=None))),
        (0.030, ev(delta(content=""))),
        (0.250, ev(delta(reasoning_content="think"))),
        (0.300, ev(delta(reasoning_content="ing"))),
        (0.400, ev(delta(content="Hello"))),
        (0.410, ev(delta(content=" world"))),
        (0.420, ev(finish())),
        (0.430, ev(usage(50, 4, prompt_tokens_details={"cached_tokens": 32}))),
        (0.440, DONE),
    ])
    assert out.error is None and out.ok
    assert out.ttft_s == pytest.approx(0.250)
    assert out.ttft_content_s == pytest.approx(0.400)
    assert out.e2e_s == pytest.approx(0.440)
    assert out.t_send == 100.0 and out.t_send_unix == 1.7e9
    assert out.content == "Hello world" and out.reasoning == "thinking"
    assert (out.streamed_tokens, out.streamed_content_tokens, out.streamed_reasoning_tokens) == (4, 2, 2)
    assert out.finish_reason == "stop"
    assert (out.prompt_tokens, out.completion_tokens) == (50, 4)
    assert (out.cached_tokens, out.cached_source) == (32, "usage.prompt_tokens_details.cached_tokens")


def test_data_without_space_event_lines_and_crlf() -> None:
    out = run_send([
        b"event: message\r\n",
        ev(delta(content="a"), sep=b"data:", end=b"\r\n\r\n"),
        b":comment\r\n\r\n",
        ev(delta(content="b"), sep=b"data:", end=b"\r\n\r\n"),
        ev(finish(), sep=b"data:"),
        b"data:[DONE]\n\n",
    ])
    assert out.error is None
    assert out.content == "ab" and out.streamed_tokens == 2


def test_events_split_across_network_chunks() -> None:
    raw = ev(delta(content="hé")) + ev(delta(content="llo")) + ev(finish()) + DONE
    out = run_send([raw[i:i + 7] for i in range(0, len(raw), 7)])
    assert out.error is None and out.content == "héllo" and out.streamed_tokens == 2


def test_reasoning_field_and_tool_calls_count_as_tokens() -> None:
    out = run_send([
        (0.1, ev(delta(tool_calls=[{"index": 0, "function": {"name": "f"}}]))),
        (0.2, ev(delta(reasoning="r", reasoning_content="r"))),
        (0.3, ev(finish("tool_calls"))), DONE,
    ])
    assert out.ttft_s == pytest.approx(0.1) and out.ttft_content_s is None
    assert out.streamed_tokens == 2 and out.reasoning == "r"  # the duplicate field is not doubled
    assert out.finish_reason == "tool_calls"


def test_done_ends_reading() -> None:
    out = run_send([ev(delta(content="a")), ev(finish()), DONE, ev(delta(content="ignored"))])
    assert out.content == "a" and out.error is None


# ---------------------------------------------------------------- errors inside the stream


def test_malformed_chunk_is_recorded_and_reading_continues() -> None:
    out = run_send([
        ev(delta(content="a")), b'data: {"choices": [\n\n', ev(delta(content="b")),
        ev(finish()), ev(usage(20, 2)), DONE,
    ])
    assert out.error is not None and out.error.kind == "malformed"
    assert '{"choices": [' in (out.error.body or "")
    assert out.content == "ab" and out.prompt_tokens == 20


def test_wrong_chunk_shape_is_malformed_not_a_crash() -> None:
    out = run_send([ev({"choices": ["oops"]}), ev(delta(content="a")), ev(finish()), DONE])
    assert out.error is not None and out.error.kind == "malformed"
    assert out.content == "a"


def test_error_payload_is_engine_error() -> None:
    out = run_send([ev(delta(content="a")), ev({"error": {"message": "context overflow", "type": "invalid_request_error"}})])
    assert out.error is not None and out.error.kind == "engine"
    assert "context overflow" in out.error.message
    assert out.content == "a" and out.streamed_tokens == 1


def test_vllm_style_error_object_and_malformed_count() -> None:
    out = run_send([ev(delta(content="a")), ev({"object": "error", "message": "engine dead", "type": "InternalServerError"})])
    assert out.error is not None and out.error.kind == "engine" and "engine dead" in out.error.message
    bad = run_send([b"data: {\n\n", b"data: [1]\n\n", ev(delta(content="a")), ev(finish()), DONE])
    assert bad.error is not None and bad.error.kind == "malformed" and "(2 malformed chunks)" in bad.error.message


def test_event_error_is_engine_error() -> None:
    out = run_send([ev(delta(content="a")), b"event: error\n", b"data: slot unavailable\n\n"])
    assert out.error is not None and out.error.kind == "engine"
    assert "slot unavailable" in out.error.message


def test_stream_without_done_or_finish_is_cut_and_keeps_tokens() -> None:
    out = run_send([ev(delta(content="a")), ev(delta(reasoning_content="r"))])
    assert out.error is not None and out.error.kind == "stream_cut"
    assert out.content == "a" and out.reasoning == "r" and out.ttft_s is not None


def test_finish_reason_without_done_is_complete() -> None:
    out = run_send([ev(delta(content="a")), ev(finish("length")), ev(usage(9, 1))])
    assert out.error is None and out.finish_reason == "length" and out.prompt_tokens == 9


def test_malformed_then_cut_reports_the_cut() -> None:
    out = run_send([ev(delta(content="a")), b"data: nope\n\n"])
    assert out.error is not None and out.error.kind == "stream_cut"
    assert "malformed" in out.error.message


def test_http_error_surfaces_engine_message() -> None:
    body = json.dumps({"object": "error", "message": "max_tokens must be at least 1", "type": "BadRequestError"}).encode()
    out = run_send([body], status=400, ctype="application/json")
    assert out.error is not None and out.error.kind == "http" and out.error.status == 400
    assert "max_tokens must be at least 1" in out.error.message
    assert out.http_status == 400 and out.ttft_s is None


def test_non_streamed_json_answer_is_read() -> None:
    body = {"choices": [{"message": {"content": "hi", "reasoning_content": "hm"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}, "timings": {"cache_n": 2, "prompt_n": 3}}
    out = run_send([json.dumps(body).encode()], ctype="application/json")
    assert out.error is None and out.content == "hi" and out.reasoning == "hm"
    assert out.ttft_s is None  # not invented
    assert (out.cached_tokens, out.cached_source) == (2, "timings.cache_n")


def test_sse_mislabelled_as_json_is_still_streamed() -> None:
    out = run_send([b"\n", (0.2, ev(delta(content="a"))), (0.3, ev(delta(content="b"))), ev(finish()), DONE],
                   ctype="application/json")
    assert out.error is None and out.content == "ab" and out.ttft_s == pytest.approx(0.2)


# ---------------------------------------------------------------- abort


def test_abort_after_exactly_n_tokens_even_within_one_network_chunk() -> None:
    many = b"".join(ev(delta(content=f"c{i}")) for i in range(3))
    more = b"".join(ev(delta(reasoning_content=f"r{i}")) for i in range(3))
    out = run_send([more, many, ev(finish()), DONE], abort_after=4)
    assert out.aborted and out.error is None
    assert out.streamed_tokens == 4
    assert out.reasoning == "r0r1r2" and out.content == "c0"
    assert (out.streamed_reasoning_tokens, out.streamed_content_tokens) == (3, 1)
    assert out.finish_reason is None


def test_early_stop_when_stream_finishes_before_target() -> None:
    out = run_send([ev(delta(content="a")), ev(delta(content="b")), ev(finish()), DONE], abort_after=5)
    assert not out.aborted
    assert out.error is not None and out.error.kind == "early_stop"
    assert out.error.message == "stream finished before the abort target (2 < 5 tokens)"
    assert out.content == "ab"


# ---------------------------------------------------------------- cached tokens across chunks


def test_later_usage_chunk_does_not_reset_known_cached() -> None:
    out = run_send([
        ev(delta(content="a")),
        ev({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 8}}}),
        ev(usage(10, 1)),  # a later usage chunk without details
        DONE,
    ])
    assert (out.cached_tokens, out.cached_source) == (8, "usage.prompt_tokens_details.cached_tokens")


def test_timings_fallback_and_suspicious_checks() -> None:
    out = run_send([
        ev(delta(content="a")), ev(finish()),
        ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1},
            "timings": {"cache_n": 10, "prompt_n": 1, "prompt_ms": 4.0, "ttft_ms": 5.5}}),
        DONE,
    ])
    assert (out.cached_tokens, out.cached_source) == (10, "timings.cache_n")
    assert out.server_prefill_ms == 4.0 and out.server_ttft_ms == 5.5
    assert any("== prompt_tokens" in s for s in out.suspicious)
    assert any("prompt_n + timings.cache_n = 11" in s for s in out.suspicious)
    assert "suspicious" in out.model_dump()


def test_cached_unknown_is_none_not_zero() -> None:
    out = run_send([ev(delta(content="a")), ev(finish()), ev(usage(10, 1)), DONE])
    assert (out.cached_tokens, out.cached_source) == (None, "none")


def test_declared_zero_needs_a_usage_object() -> None:
    ep = Endpoint(base_url="http://h/v1", model="m", cached_zero_when_absent=True)
    out = run_send([ev(delta(content="a")), ev(finish()), ev(usage(10, 1)), DONE], endpoint=ep)
    assert (out.cached_tokens, out.cached_source) == (0, "declared_zero")
    cut = run_send([ev(delta(content="a")), ev(finish()), DONE], endpoint=ep)
    assert (cut.cached_tokens, cut.cached_source) == (None, "none")


def test_prompt_progress_gives_cached_for_a_cut_stream() -> None:
    out = run_send([
        ev({"choices": [{"delta": {"role": "assistant", "content": None}}],
            "prompt_progress": {"total": 100, "cache": 64, "processed": 80, "time_ms": 3}}),
        ev(delta(content="a")),
    ])
    assert out.error is not None and out.error.kind == "stream_cut"
    assert (out.cached_tokens, out.cached_source) == (64, "prompt_progress.cache")


def test_cancelled_error_propagates() -> None:
    async def go() -> None:
        async def body() -> AsyncIterator[bytes]:
            yield ev(delta(content="a"))
            await asyncio.sleep(10)
            yield DONE

        transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"}))
        async with httpx.AsyncClient(transport=transport) as client:
            task = asyncio.create_task(send(HttpxTransport(client), Endpoint(base_url="http://h/v1", model="m"),
                                            ChatRequest(id="c", messages=MSGS, max_tokens=4)))
            await asyncio.sleep(0.05)
            task.cancel()
            await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(go())


def test_chunks_python_json_reads_are_not_malformed() -> None:
    """A delta with a lone surrogate escape (a multi-byte character split across tokens) or a
    NaN is read as Python's json reads it, not called malformed by the fast decoder."""
    out = run_send([ev(b'{"choices":[{"index":0,"delta":{"content":"a\\ud83d"}}]}'),
                    ev(b'{"choices":[{"index":0,"delta":{"content":"b"}}],"x":NaN}'),
                    ev(finish()), ev(usage(completion=2)), DONE])
    assert out.error is None
    assert out.content == "a\ud83db"


def test_body_is_compact_utf8_json() -> None:
    seen: list[httpx.Request] = []
    run_send([ev(finish()), DONE], seen=seen, messages=[{"role": "user", "content": "café"}],
             options={"temperature": 0.7, "big": 2 ** 70})
    raw = seen[0].content
    assert b'"content":"caf\xc3\xa9"' in raw and b", " not in raw
    assert json.loads(raw)["big"] == 2 ** 70 and json.loads(raw)["temperature"] == 0.7
