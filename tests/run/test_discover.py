"""Engine discovery: /models payload shapes, model choice, context length sources, engine names,
tokenizer probing, and clear EndpointErrors."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from faultserver import FaultServer
from workloadlang.run.discover import EngineInfo, Tokenizer, discover
from workloadlang.run.errors import EndpointError

Routes = dict[tuple[str, str], Callable[[httpx.Request], httpx.Response]]


def reply(obj: Any, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json=obj)


def run_discover(routes: Routes, base: str = "http://engine/v1", seen: list[httpx.Request] | None = None, **kw: Any) -> EngineInfo:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        route = routes.get((request.method, request.url.path))
        return route(request) if route else httpx.Response(404, json={"error": {"message": "no route"}})

    async def go() -> EngineInfo:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await discover(client, base, **kw)

    return asyncio.run(go())


def llama_tokenize(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if "content" not in body:  # llama.cpp: a missing content tokenizes as nothing
        return httpx.Response(200, json={"tokens": []})
    return httpx.Response(200, json={"tokens": list(range(len(body["content"].split())))})


def vllm_tokenize(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if "prompt" not in body:
        return httpx.Response(400, json={"object": "error", "message": "prompt required"})
    return httpx.Response(200, json={"count": 11, "tokens": list(range(11)), "max_model_len": 8192})


def test_vllm_openai_payload() -> None:
    info = run_discover({
        ("GET", "/v1/models"): reply({"object": "list", "data": [{"id": "qwen", "owned_by": "vllm", "max_model_len": 32768}]}),
        ("POST", "/tokenize"): vllm_tokenize,
    })
    assert (info.model, info.models, info.engine) == ("qwen", ["qwen"], "vllm")
    assert (info.max_context, info.max_context_source) == (32768, "max_model_len")
    assert (info.tokenize_url, info.tokenize_style) == ("http://engine/tokenize", "prompt")
    assert info.metrics_url == "http://engine/metrics" and info.notes == []


def test_llamacpp_payload_meta_n_ctx_and_content_tokenizer() -> None:
    models = {"models": [{"name": "tiny", "model": "tiny"}],
              "data": [{"id": "tiny", "owned_by": "llamacpp", "meta": {"n_ctx": 8192, "n_ctx_train": 8192}}]}
    info = run_discover({("GET", "/v1/models"): reply(models), ("POST", "/tokenize"): llama_tokenize})
    assert (info.engine, info.max_context, info.max_context_source) == ("llamacpp", 8192, "meta.n_ctx")
    assert info.tokenize_style == "content"


def test_llamacpp_models_list_only_and_props_context() -> None:
    models = {"models": [{"name": "a.gguf", "model": "a.gguf"}, {"model": "b"}, {"model": "a.gguf"}, {"id": ""}]}
    props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}
    info = run_discover({("GET", "/v1/models"): reply(models), ("GET", "/props"): reply(props),
                         ("POST", "/tokenize"): llama_tokenize})
    assert info.models == ["a.gguf", "b"] and info.model == "a.gguf"
    assert info.notes[0] == "several models: a.gguf, b; using a.gguf — pass --model"
    assert (info.max_context, info.max_context_source) == (4096, "/props default_generation_settings.n_ctx")
    assert info.engine == "unknown" and info.slots == 4 and not info.prefill_own


def test_llamacpp_props_are_read_for_the_slot_count_even_with_the_context_known() -> None:
    models = {"data": [{"id": "tiny", "owned_by": "llamacpp", "meta": {"n_ctx": 8192}}]}
    for props, slots in (({"total_slots": 1}, 1), ({"total_slots": 0}, None), ({}, None)):
        info = run_discover({("GET", "/v1/models"): reply(models), ("GET", "/props"): reply(props),
                             ("POST", "/tokenize"): llama_tokenize})
        assert (info.max_context_source, info.slots) == ("meta.n_ctx", slots)
        assert info.prefill_own is (slots == 1)  # one slot: the others wait outside its time


def test_an_engine_that_says_its_prefill_time_is_its_own_work() -> None:
    """`/props` `prefill_time: "own"` (the embedded simulator's) with several slots: the prefill
    time is still the request's own work. Any other value, or none, is not taken for it."""
    models = {"data": [{"id": "sim", "owned_by": "workloadlang-sim", "max_model_len": 8192}]}
    for extra, own in (({"prefill_time": "own"}, True), ({"prefill_time": "shared"}, False),
                       ({}, False)):
        props = {"total_slots": 4, **extra}
        info = run_discover({("GET", "/v1/models"): reply(models), ("GET", "/props"): reply(props),
                             ("POST", "/tokenize"): llama_tokenize})
        assert (info.engine, info.slots, info.prefill_own) == ("workloadlang-sim", 4, own)


def test_bare_list_and_explicit_model_and_max_context() -> None:
    seen: list[httpx.Request] = []
    info = run_discover(
        {("GET", "/v1/models"): reply([{"id": "x", "owned_by": "sglang", "max_model_len": 100}, {"id": "y"}])},
        seen=seen, model="y", max_context=2048, api_key="sk-d",
    )
    assert info.model == "y" and info.engine == "unknown"  # y has no owned_by
    assert (info.max_context, info.max_context_source) == (2048, "--max-context")
    assert info.tokenize_url is None and any("/tokenize" in n for n in info.notes)
    assert all(r.headers.get("authorization") == "Bearer sk-d" for r in seen)


def test_unlisted_model_is_a_note_and_meta_null_leaves_context_unknown() -> None:
    info = run_discover({("GET", "/v1/models"): reply({"data": [{"id": "a", "owned_by": "llamacpp", "meta": None}]})},
                        model="zzz")
    assert info.model == "zzz"
    assert any("not listed" in n for n in info.notes)
    assert info.max_context is None and info.max_context_source is None
    assert any("pass --max-context" in n for n in info.notes)


@pytest.mark.parametrize("owner, engine", [("ninfer", "ninfer"), ("workloadlang-sim", "workloadlang-sim"),
                                           ("sglang", "sglang"), ("openai", "unknown")])
def test_engine_names(owner: str, engine: str) -> None:
    info = run_discover({("GET", "/v1/models"): reply({"data": [{"id": "m", "owned_by": owner, "max_model_len": 10}]})})
    assert info.engine == engine


@pytest.mark.parametrize(("routes", "kind", "text"), [
    ({}, "http", "HTTP 404: no route"),
    ({("GET", "/v1/models"): lambda r: httpx.Response(200, content=b"<html>hi</html>")}, "bad_payload", "not JSON"),
    ({("GET", "/v1/models"): reply({"object": "list"})}, "bad_payload", "no model list"),
    ({("GET", "/v1/models"): reply({"data": []})}, "no_model", "pass --model"),
])
def test_models_errors_are_endpoint_errors(routes: Routes, kind: str, text: str) -> None:
    with pytest.raises(EndpointError) as info:
        run_discover(routes)
    assert info.value.kind == kind and text in str(info.value)
    assert "\n" not in str(info.value)


def test_unreachable_models() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()

    async def go() -> None:
        async with httpx.AsyncClient() as client:
            await discover(client, f"http://127.0.0.1:{port}/v1", timeout=2)

    with pytest.raises(EndpointError) as info:
        asyncio.run(go())
    assert info.value.kind == "unreachable" and "cannot connect" in str(info.value)


def test_tokenizer_count_styles_and_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return vllm_tokenize(request) if request.url.host == "v" else llama_tokenize(request)

    async def go() -> tuple[int, int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            n_prompt = await Tokenizer(client, "http://v/tokenize", "prompt", model="m").count("a b c")
            n_content = await Tokenizer(client, "http://l/tokenize", "content").count("a b c")
            with pytest.raises(EndpointError):
                await Tokenizer(client, "http://v/tokenize", "content").count("a b c")
            return n_prompt, n_content

    assert asyncio.run(go()) == (11, 3)


def test_discover_against_real_server_probes_tokenizer(fault_server: FaultServer) -> None:
    async def go() -> tuple[EngineInfo, int]:
        async with httpx.AsyncClient() as client:
            info = await discover(client, fault_server.base_url + "/")
            tok = Tokenizer.from_info(client, info)
            assert tok is not None
            return info, await tok.count("one two three four")

    info, n = asyncio.run(go())
    assert (info.model, info.engine, info.max_context) == ("fault-model", "vllm", 4096)
    assert info.tokenize_style == "prompt" and n == 4
    assert info.metrics_url == fault_server.root_url + "/metrics"
