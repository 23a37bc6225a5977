"""Model and context discovery through `wl run` (the CLI's `main`, in-process) against a REAL
loopback server: several models -> the first with a note, `--model`, `--max-context` overriding
what the engine says, llama.cpp `meta.n_ctx` and `/props`, and a plan larger than the context
refused with WL406 (exit 2) before any chat request is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultserver import FaultServer
from runhelp import wl_run_text as wl_run

SMALL = 'workload small { session s { user filler 1k; reply 4 } }'
BIG = 'workload big { session s { user filler 3k; reply 4 } }'  # fits 4096, not 2048


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server




def two_models(ctx_b: int = 8192) -> dict[str, Any]:
    return {"object": "list", "data": [
        {"id": "model-a", "owned_by": "vllm", "max_model_len": 4096},
        {"id": "model-b", "owned_by": "vllm", "max_model_len": ctx_b}]}


def test_several_models_use_the_first_with_a_note(tmp_path: Path, server: FaultServer, capsys) -> None:
    server.models_body = two_models()
    code, res = wl_run(tmp_path, SMALL, "--base-url", server.base_url)
    assert code == 0
    err = capsys.readouterr().err
    assert "note: several models: model-a, model-b; using model-a" in err
    assert res["engine"]["model"] == "model-a" and res["engine"]["max_context"] == 4096
    assert any("several models" in n for n in res["engine"]["notes"])
    assert [r["body"]["model"] for r in server.chat_requests()] == ["model-a"]


def test_model_flag_picks_another_and_its_context(tmp_path: Path, server: FaultServer, capsys) -> None:
    server.models_body = two_models(ctx_b=2048)
    code, res = wl_run(tmp_path, SMALL, "--base-url", server.base_url, "--model", "model-b")
    assert code == 0 and "several models" not in capsys.readouterr().err
    assert res["engine"]["model"] == "model-b"
    assert (res["engine"]["max_context"], res["engine"]["max_context_source"]) == (2048, "max_model_len")
    assert [r["body"]["model"] for r in server.chat_requests()] == ["model-b"]


def test_plan_larger_than_the_context_is_refused_before_any_chat(tmp_path: Path, server: FaultServer,
                                                                 capsys) -> None:
    server.models_body = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 2048}]}
    code, res = wl_run(tmp_path, BIG, "--base-url", server.base_url)
    assert code == 2 and res == {}
    err = capsys.readouterr().err
    assert "WL406" in err and "w.wl:1:" in err
    assert server.chat_requests() == []
    assert not (tmp_path / "r.jsonl").exists()


def test_max_context_overrides_the_engine_both_ways(tmp_path: Path, server: FaultServer, capsys) -> None:
    # the engine says 4096 (BIG fits); --max-context 2048 makes it too large ...
    code, _ = wl_run(tmp_path, BIG, "--base-url", server.base_url, "--max-context", "2048")
    assert code == 2 and "WL406" in capsys.readouterr().err
    assert server.chat_requests() == []
    # ... and an engine that says 2048 is overridden upwards by --max-context 8192
    server.models_body = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 2048}]}
    code, res = wl_run(tmp_path, BIG, "--base-url", server.base_url, "--max-context", "8192")
    assert code == 0
    assert (res["engine"]["max_context"], res["engine"]["max_context_source"]) == (8192, "--max-context")
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize(("models", "props", "ctx", "source"), [
    ({"models": [{"name": "x", "model": "x.gguf", "meta": {"n_ctx": 3000}}]}, None, 3000, "meta.n_ctx"),
    ([{"id": "bare"}], {"default_generation_settings": {"n_ctx": 2500}}, 2500,
     "/props default_generation_settings.n_ctx"),
    ({"data": [{"id": "m"}]}, None, None, None),
])
def test_context_from_llama_cpp_shapes(tmp_path: Path, server: FaultServer, capsys,
                                       models: Any, props: Any, ctx: int | None, source: str | None) -> None:
    server.models_body, server.props = models, props
    code, res = wl_run(tmp_path, SMALL, "--base-url", server.base_url)
    assert code == 0
    assert (res["engine"]["max_context"], res["engine"]["max_context_source"]) == (ctx, source)
    if ctx is None:
        assert "could not detect the context length; pass --max-context" in capsys.readouterr().err

