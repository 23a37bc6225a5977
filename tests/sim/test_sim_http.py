"""End-to-end tests of the simulator over real HTTP on loopback (start_in_thread + httpx):
wire shapes, cache hits and evictions, the host tier, pinning, aborts, time model and slots."""

from __future__ import annotations

import asyncio
import json
import time
import zlib

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workloadlang.sim import SimConfig, start_in_thread

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

FAST = dict(prefill_us_per_token=0.0, decode_us_per_token=0.0)
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def text(tag: str, n: int) -> str:
    """`n` distinct words tagged `tag` (one token each)."""
    return " ".join(f"{tag}{i}" for i in range(n))


def user(tag: str, n: int) -> dict:
    return {"role": "user", "content": text(tag, n)}


CLIENT = httpx.Client(timeout=30)  # one pool: building a client per call costs ~20 ms


@pytest.fixture(scope="module", autouse=True)
def _close_client():
    yield
    CLIENT.close()


@pytest.fixture
def sim():
    """Factory: start a simulator with SimConfig overrides; all are stopped at teardown."""
    handles = []

    def start(**overrides):
        handle = start_in_thread(SimConfig(**{**FAST, **overrides}))
        handles.append(handle)
        return handle

    yield start
    for h in handles:
        h.stop()


def chat(h, messages, max_tokens=1, stream=True, session=None, timeout=30.0, **extra):
    """One chat completion; returns a dict with status, usage, timings, content, reasoning,
    chunks (parsed SSE payloads) and body (non-streaming JSON or error JSON)."""
    headers = {"X-WL-Session": session} if session else {}
    payload = {"model": "wl-sim", "messages": messages, "max_tokens": max_tokens,
               "stream": stream, **extra}
    if stream:
        payload.setdefault("stream_options", {"include_usage": True})
    client = CLIENT if timeout >= 30 else httpx.Client(timeout=timeout)
    try:
        r = client.post(f"{h.base_url}/chat/completions", json=payload, headers=headers)
    finally:
        if client is not CLIENT:
            client.close()
    out = {"status": r.status_code, "usage": None, "timings": None, "content": "",
           "reasoning": "", "chunks": [], "body": None}
    if r.status_code != 200 or not stream:
        out["body"] = r.json()
        body = out["body"]
        if r.status_code == 200:
            msg = body["choices"][0]["message"]
            out.update(usage=body["usage"], timings=body["timings"], content=msg["content"],
                       reasoning=msg.get("reasoning_content", ""))
        return out
    lines = [ln for ln in r.text.split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for ln in lines[:-1]:
        chunk = json.loads(ln[6:])
        out["chunks"].append(chunk)
        out["usage"] = chunk.get("usage", out["usage"])
        out["timings"] = chunk.get("timings", out["timings"])
        for choice in chunk["choices"]:
            out["content"] += choice["delta"].get("content") or ""
            out["reasoning"] += choice["delta"].get("reasoning_content") or ""
    return out


def cached(result) -> int:
    return result["usage"]["prompt_tokens_details"]["cached_tokens"]


def state(h) -> dict:
    return CLIENT.get(f"{h.root_url}/sim/state").json()


def wait_for(h, predicate, timeout=5.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        s = state(h)
        if predicate(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.01)


def abort_after(h, messages, tokens, **extra) -> tuple[list, list]:
    """Stream a request and close the connection after `tokens` token chunks.
    Returns (reasoning deltas, content deltas) received."""
    payload = {"messages": messages, "max_tokens": 10_000, "stream": True, **extra}
    reasoning, content = [], []
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{h.base_url}/chat/completions", json=payload) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
                elif delta.get("content"):
                    content.append(delta["content"])
                if len(reasoning) + len(content) >= tokens:
                    break
    return reasoning, content


# ---------------------------------------------------------------- shapes


def test_models_health_and_stream_shape(sim):
    h = sim(model="tiny", max_model_len=4096)
    models = CLIENT.get(f"{h.base_url}/models").json()
    assert models["data"][0] == {"id": "tiny", "object": "model", "created": 0,
                                 "owned_by": "workloadlang-sim", "max_model_len": 4096}
    assert CLIENT.get(f"{h.root_url}/health").json() == {"status": "ok"}
    r = chat(h, [SYSTEM, user("a", 40)], max_tokens=7)
    chunks = r["chunks"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    tokens = chunks[1:8]
    assert all(len(c["choices"][0]["delta"]["content"].split()) == 1 for c in tokens)
    assert chunks[8]["choices"][0]["finish_reason"] == "length"
    assert chunks[9]["choices"] == [] and "timings" in chunks[9] and "timings" not in chunks[8]
    assert r["usage"]["prompt_tokens"] == 8 + 43 + 2 and r["usage"]["completion_tokens"] == 7
    assert r["usage"]["total_tokens"] == 53 + 7 and len(r["content"].split()) == 7
    t = r["timings"]
    assert {"prompt_n", "prompt_ms", "cache_n", "predicted_n", "predicted_ms", "queue_ms",
            "ttft_ms"} <= set(t)
    assert t["prompt_n"] + t["cache_n"] == 53 and t["predicted_n"] == 7
    # no include_usage: timings ride on the finish chunk
    plain = chat(h, [user("b", 5)], max_tokens=2, stream_options={})
    assert plain["usage"] is None and "timings" in plain["chunks"][-1]


def test_non_streaming_body_and_thinking(sim):
    h = sim(think_tokens=5)
    r = chat(h, [user("a", 20)], max_tokens=8, stream=False, reasoning_effort="high")
    body = r["body"]
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "length"
    assert len(r["reasoning"].split()) == 5 and len(r["content"].split()) == 3
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5
    off = chat(h, [user("b", 20)], max_tokens=8, reasoning_effort="none")
    assert off["reasoning"] == "" and len(off["content"].split()) == 8
    kw = chat(h, [user("c", 20)], max_tokens=8, chat_template_kwargs={"thinking": True})
    assert len(kw["reasoning"].split()) == 5
    # deterministic text: the same prompt gives the same reply
    assert chat(h, [user("b", 20)], max_tokens=8)["content"] == off["content"]


def test_prompt_over_max_model_len_is_400(sim):
    h = sim(max_model_len=100)
    r = chat(h, [user("a", 200)])
    assert r["status"] == 400
    err = r["body"]["error"]
    assert err["type"] == "BadRequestError" and "maximum context length is 100" in err["message"]
    bad = CLIENT.post(f"{h.base_url}/chat/completions", content=b"{nope")
    assert bad.status_code == 400 and "error" in bad.json()


def test_tokenize_shapes(sim):
    h = sim(max_model_len=5000)
    url = f"{h.root_url}/tokenize"
    a = CLIENT.post(url, json={"prompt": "hello big world"}).json()
    b = CLIENT.post(url, json={"content": "hello big world"}).json()
    assert a == b and a["count"] == 3 and a["max_model_len"] == 5000
    assert a["tokens"][0] == zlib.crc32(b"hello")
    msgs = [SYSTEM, user("a", 30)]
    t = CLIENT.post(url, json={"messages": msgs}).json()
    assert t["count"] == chat(h, msgs)["usage"]["prompt_tokens"] == len(t["tokens"])
    assert CLIENT.post(url, json={"nothing": 1}).status_code == 400


# ---------------------------------------------------------------- cache behaviour


def test_repeated_prompt_reports_block_rounded_cache(sim):
    h = sim(block_size=16)
    msgs = [SYSTEM, user("a", 200)]
    first, second = chat(h, msgs), chat(h, msgs)
    n = first["usage"]["prompt_tokens"]
    assert cached(first) == 0
    assert cached(second) == (n - 1) // 16 * 16
    assert second["timings"]["cache_n"] == cached(second)
    assert second["timings"]["prompt_n"] == n - cached(second)


@pytest.mark.parametrize("thinking", [False, True])
def test_grown_conversation_with_replayed_reply_hits(sim, thinking):
    h = sim(think_tokens=9)
    extra = {"reasoning_effort": "high"} if thinking else {}
    msgs = [SYSTEM, user("a", 300)]
    first = chat(h, msgs, max_tokens=20, **extra)
    reply = {"role": "assistant", "content": first["content"]}
    if thinking:
        reply["reasoning_content"] = first["reasoning"]
    grown = msgs + [reply, user("b", 100)]
    second = chat(h, grown, max_tokens=1, **extra)
    generated = 20 + (2 if thinking else 0)  # `<think>` and `</think>` are tokens too
    assert cached(second) == (first["usage"]["prompt_tokens"] + generated) // 16 * 16
    # a reply replayed differently breaks the match at the reply
    wrong = msgs + [{"role": "assistant", "content": "zzz " + first["content"]}, user("b", 100)]
    assert cached(chat(h, wrong, **extra)) == first["usage"]["prompt_tokens"] // 16 * 16


def test_lru_eviction_at_capacity(sim):
    h = sim(device_tokens=1024)  # 64 blocks; each context is ~13 blocks
    contexts = [[SYSTEM, user(f"c{i}-", 200)] for i in range(8)]
    for msgs in contexts:
        chat(h, msgs)
    s = state(h)["cache"]
    assert s["used_tokens"] <= s["capacity_tokens"] == 1024 and s["counters"]["evicted"] > 0
    newest = chat(h, contexts[-1])
    assert cached(newest) == (newest["usage"]["prompt_tokens"] - 1) // 16 * 16
    assert cached(chat(h, contexts[0])) == 0  # oldest: evicted


def test_host_tier_restore_counts_as_cached_and_costs_time(sim):
    h = sim(device_tokens=512, host_tokens=4096, host_restore_us_per_token=200.0,
            prefill_us_per_token=400.0, prefill_ctx_scale=0)
    a, b = [SYSTEM, user("a", 320)], [SYSTEM, user("b", 320)]  # 20 full blocks each
    cold = chat(h, a)
    chat(h, b)  # 40 blocks > 32: a's 8 tail blocks move to the host tier
    again = chat(h, a)
    n = again["usage"]["prompt_tokens"]
    restored = again["timings"]["host_restored_n"]
    assert cached(again) == (n - 1) // 16 * 16 and restored == 8 * 16
    restore_ms = restored * 0.2
    assert again["timings"]["prompt_ms"] >= 0.9 * restore_ms
    assert again["timings"]["prompt_ms"] < 0.6 * cold["timings"]["prompt_ms"]


def test_pinned_blocks_of_active_request_are_not_evicted(sim):
    h = sim(device_tokens=1024, slots=4, decode_us_per_token=2000.0)
    long = [SYSTEM, user("long", 600)]  # ~38 blocks, pinned while it decodes
    result = {}

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            async def active():
                r = await client.post(f"{h.base_url}/chat/completions", json={
                    "messages": long, "max_tokens": 150, "stream": False})
                result["long"] = r.json()

            task = asyncio.ensure_future(active())
            await asyncio.sleep(0.1)
            for i in range(4):  # ~52 blocks of other traffic while `long` is active
                await client.post(f"{h.base_url}/chat/completions", json={
                    "messages": [user(f"o{i}-", 200)], "max_tokens": 1})
            pinned = (await client.get(f"{h.root_url}/sim/state")).json()["cache"]
            twin = await client.post(f"{h.base_url}/chat/completions", json={
                "messages": long, "max_tokens": 1})
            await task
            return pinned, twin.json()

    pinned, twin = asyncio.run(scenario())
    assert pinned["pinned_blocks"] >= 37 and pinned["counters"]["evicted"] > 0
    n = twin["usage"]["prompt_tokens"]
    assert twin["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16


@pytest.mark.parametrize("mode", ["continuation", "branch"])
def test_abort_keeps_prompt_and_generated(sim, mode):
    h = sim(think_tokens=200, decode_us_per_token=1000.0)
    msgs = [SYSTEM, user("a", 500)]
    n1 = CLIENT.post(f"{h.root_url}/tokenize", json={"messages": msgs}).json()["count"]
    reasoning, _ = abort_after(h, msgs, 40, reasoning_effort="high")
    s = wait_for(h, lambda s: s["counters"]["aborted"] == 1)
    assert s["counters"]["aborted"] == 1 and s["active"] == 0
    partial = {"role": "assistant", "content": "", "reasoning_content": "".join(reasoning)}
    follow = msgs + [partial] + ([user("b", 30)] if mode == "branch" else [])
    r = chat(h, follow, max_tokens=1)
    kept = (n1 + 1 + len(reasoning)) // 16 * 16  # prompt + `<think>` + the replayed reasoning
    assert len(reasoning) == 40 and cached(r) >= kept
    assert cached(r) >= 0.9 * r["usage"]["prompt_tokens"]


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_during_prefill_cancels(sim, stream):
    h = sim(prefill_us_per_token=1000.0, prefill_ctx_scale=0)
    msgs = [SYSTEM, user("slow", 1000)]  # ~1 s of prefill
    with pytest.raises(httpx.TimeoutException):
        chat(h, msgs, timeout=0.2, stream=stream)
    s = wait_for(h, lambda s: s["counters"]["cancelled"] == 1)
    assert s["counters"]["cancelled"] == 1 and s["cache"]["blocks"] == 0 and s["active"] == 0


def test_slots_queue_fifo(sim):
    h = sim(slots=1, prefill_us_per_token=100.0, prefill_ctx_scale=0)  # ~100 ms per prompt

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            async def one(i):
                await asyncio.sleep(0.02 * i)
                r = await client.post(f"{h.base_url}/chat/completions", json={
                    "messages": [user(f"q{i}-", 1000)], "max_tokens": 1})
                return r.json()["timings"]

            return await asyncio.gather(*(one(i) for i in range(3)))

    timings = asyncio.run(scenario())
    queue = [t["queue_ms"] for t in timings]
    assert queue[0] < 20 and 50 < queue[1] < queue[2]
    assert all(t["ttft_ms"] >= t["queue_ms"] + t["prompt_ms"] - 1 for t in timings)


def test_prefill_time_grows_and_cached_is_faster(sim):
    h = sim(prefill_us_per_token=50.0, prefill_ctx_scale=1000)
    small = chat(h, [user("s", 500)])["timings"]["prompt_ms"]
    big_msgs = [user("b", 2000)]
    big = chat(h, big_msgs)
    # closed form: 50 us x (n + n(n-1)/2/1000), n = 503 and 2003
    assert small >= 50e-3 * (503 + 503 * 502 / 2000) * 0.95
    assert big["timings"]["prompt_ms"] >= 50e-3 * (2003 + 2003 * 2002 / 2000) * 0.95
    assert big["timings"]["prompt_ms"] > 5 * small  # 4x the tokens, more than 4x the time
    warm = chat(h, big_msgs)
    assert warm["timings"]["prompt_ms"] < big["timings"]["prompt_ms"] / 10


def test_metrics_parse_and_counters_move(sim):
    h = sim()

    def counters():
        families = text_string_to_metric_families(CLIENT.get(f"{h.root_url}/metrics").text)
        return {s.name: s.value for f in families for s in f.samples}

    before = counters()
    msgs = [user("m", 100)]
    a, b = chat(h, msgs), chat(h, msgs)
    after = counters()
    n = a["usage"]["prompt_tokens"]
    q = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert q == 2 * n and hits == cached(b) > 0
    assert after["wlsim_requests_total"] - before["wlsim_requests_total"] == 2
    assert after["wlsim_cache_used_tokens"] > 0


def test_reset_empties_cache(sim):
    h = sim()
    msgs = [user("r", 100)]
    chat(h, msgs)
    r = CLIENT.post(f"{h.root_url}/sim/reset").json()
    assert r["removed_blocks"] > 0 and r["cache"]["blocks"] == 0
    assert cached(chat(h, msgs)) == 0
    assert state(h)["config"]["block_size"] == 16


def test_needle_inside_and_outside_effective_context(sim):
    h = sim(effective_context=300, max_model_len=5000)
    question = "\n\nWhat is the secret code hidden in the text above? Reply in brackets."

    def ask(before, after):
        hay = f"{text('h', before)} [the secret code is wombat-1234] {text('t', after)}"
        return chat(h, [SYSTEM, {"role": "user", "content": hay + question}], max_tokens=128)

    inside, outside = ask(1000, 200), ask(200, 1000)
    assert inside["content"] == "[wombat-1234]"
    assert inside["chunks"][-2]["choices"][0]["finish_reason"] == "stop"
    assert outside["content"].startswith("[") and "wombat-1234" not in outside["content"]
    plain = chat(h, [user("x", 50)], max_tokens=5)
    assert "[" not in plain["content"] and len(plain["content"].split()) == 5


def test_the_state_names_the_requests_answered_in_the_order_their_answers_ended(sim):
    """/sim/state's `answered`: each answered request's `x-wl-request` id (else the
    simulator's own), streamed or not, the last answered last; the last 64 only."""
    h = sim()
    for i in range(3):
        CLIENT.post(f"{h.base_url}/chat/completions", headers={"x-wl-request": f"s/r/{i}"},
                    json={"messages": [user(f"a{i}-", 20)], "max_tokens": 2,
                          "stream": i != 1}).raise_for_status()
    assert state(h)["answered"] == ["s/r/0", "s/r/1", "s/r/2"]
    chat(h, [user("anon-", 20)])
    last = state(h)["answered"]
    assert last[:3] == ["s/r/0", "s/r/1", "s/r/2"] and len(last) == 4 and last[3] != "s/r/2"
    for i in range(70):
        CLIENT.post(f"{h.base_url}/chat/completions", headers={"x-wl-request": f"m/{i}"},
                    json={"messages": [user(f"m{i}-", 5)], "max_tokens": 1, "stream": False})
    assert state(h)["answered"] == [f"m/{i}" for i in range(6, 70)]
