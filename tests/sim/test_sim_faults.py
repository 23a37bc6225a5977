"""End-to-end tests of the simulator's faults over real HTTP on loopback, including their
scoping by `X-WL-Session`."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from workloadlang.sim import SimConfig, parse_fault, start_in_thread

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

FAST = dict(prefill_us_per_token=0.0, decode_us_per_token=0.0)
CLIENT = httpx.Client(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def _close_client():
    yield
    CLIENT.close()


@pytest.fixture
def sim():
    """Factory: start a simulator with overrides and `--fault` strings; stopped at teardown."""
    handles = []

    def start(*faults: str, **overrides):
        cfg = SimConfig(**{**FAST, **overrides}, faults=tuple(map(parse_fault, faults)))
        handles.append(start_in_thread(cfg))
        return handles[-1]

    yield start
    for h in handles:
        h.stop()


def msgs(tag: str, n: int) -> list:
    return [{"role": "user", "content": " ".join(f"{tag}{i}" for i in range(n))}]


def chat(h, messages, session=None, request_id=None, stream=True, max_tokens=1) -> dict:
    """POST a chat completion; returns {"status", "usage", "timings", "body"}."""
    headers = {}
    if session:
        headers["X-WL-Session"] = session
    if request_id:
        headers["X-WL-Request"] = request_id
    payload = {"messages": messages, "max_tokens": max_tokens, "stream": stream}
    if stream:
        payload["stream_options"] = {"include_usage": True}
    r = CLIENT.post(f"{h.base_url}/chat/completions", json=payload, headers=headers)
    out = {"status": r.status_code, "usage": None, "timings": None, "body": None}
    if r.status_code != 200 or not stream:
        out["body"] = r.json()
        if r.status_code == 200:
            out.update(usage=out["body"]["usage"], timings=out["body"].get("timings"))
        return out
    for line in r.text.split("\n"):
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            out["usage"] = chunk.get("usage", out["usage"])
            out["timings"] = chunk.get("timings", out["timings"])
    return out


def cached(r) -> int:
    return r["usage"]["prompt_tokens_details"]["cached_tokens"]


def state(h) -> dict:
    return CLIENT.get(f"{h.root_url}/sim/state").json()


def abort(h, messages, tokens: int, session: str | None = None) -> int:
    """Stream and disconnect after `tokens` token chunks; wait until the server saw it.
    Returns the number of token chunks received."""
    headers = {"X-WL-Session": session} if session else {}
    payload = {"messages": messages, "max_tokens": 5000, "stream": True}
    got = 0
    before = state(h)["counters"]["aborted"]
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{h.base_url}/chat/completions", json=payload,
                           headers=headers) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0][
                        "delta"].get("content"):
                    got += 1
                    if got >= tokens:
                        break
    deadline = time.monotonic() + 5
    while state(h)["counters"]["aborted"] == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return got


def test_drop_aborted_drops_the_prefix_but_only_in_scope(sim):
    h = sim("drop_aborted@agent", decode_us_per_token=1000.0)
    base = msgs("a", 400)
    got = abort(h, base, 20, session="agent#1")
    partial = base + [{"role": "assistant", "content": " ".join(["x"] * got)}]
    assert cached(chat(h, partial, session="agent#1")) == 0
    other = msgs("b", 400)
    abort(h, other, 20, session="human#1")  # out of scope: prompt + partial kept
    assert cached(chat(h, other, session="human#1")) == 400 // 16 * 16
    assert state(h)["counters"]["aborted"] == 2


def test_degraded_reports_cache_but_pays_full_prefill(sim):
    h = sim("degraded@slow", prefill_us_per_token=200.0, prefill_ctx_scale=0)
    prompt = msgs("d", 800)  # ~160 ms cold
    cold = chat(h, prompt, session="slow#1")
    fake = chat(h, prompt, session="slow#1")
    honest = chat(h, prompt, session="fast#1")
    n = cold["usage"]["prompt_tokens"]
    assert cached(fake) == cached(honest) == (n - 1) // 16 * 16
    assert fake["timings"]["prompt_ms"] > 0.9 * cold["timings"]["prompt_ms"] > 100
    assert honest["timings"]["prompt_ms"] < 0.1 * cold["timings"]["prompt_ms"]


def test_degraded_host_pays_a_prefill_only_for_what_came_back_from_the_host(sim):
    """A device that holds one 800-token context, a host tier behind it: the first context,
    pushed out by the second, comes back from the host reported cached; under `degraded_host`
    it costs the prefill of its positions, a device hit stays cheap."""
    h = sim("degraded_host@slow", prefill_us_per_token=200.0, prefill_ctx_scale=0,
            device_tokens=1024, host_tokens=8192, host_restore_us_per_token=1.0)
    first, second = msgs("f", 800), msgs("s", 800)
    cold = chat(h, first, session="slow#0")
    on_device = chat(h, first, session="slow#0")
    chat(h, second, session="slow#0")  # pushes `first` to the host
    restored = chat(h, first, session="slow#0")
    n = cold["usage"]["prompt_tokens"]
    assert cached(restored) == cached(on_device) == (n - 1) // 16 * 16
    back = restored["timings"]["host_restored_n"]
    assert back > 0.5 * cached(restored)  # the tail went to the host, the head stayed
    paid = (back + n - cached(restored)) / n * cold["timings"]["prompt_ms"]
    assert restored["timings"]["prompt_ms"] == pytest.approx(paid, rel=0.05)
    assert on_device["timings"]["prompt_ms"] < 0.1 * cold["timings"]["prompt_ms"]
    chat(h, first, session="fast#0")  # out of scope: a restore costs its restore price
    chat(h, second, session="fast#0")
    honest = chat(h, first, session="fast#0")
    assert honest["timings"]["host_restored_n"] > 0
    assert honest["timings"]["prompt_ms"] < 0.1 * cold["timings"]["prompt_ms"]


def test_slow_prefill_scoped_by_the_planned_request_id(sim):
    """`slow_prefill=F` makes a prefill F times slower; scoped by a glob over the planned
    request id (`X-WL-Request`), it slows only the requests it names, and other faults scope
    the same way."""
    h = sim("slow_prefill=3@*/finalize/*", "degraded@*/finalize/*", prefill_us_per_token=200.0,
            prefill_ctx_scale=0)
    a, b = msgs("a", 400), msgs("b", 400)
    plain = chat(h, a, session="main#0", request_id="main#0/grow/main/0")
    slow = chat(h, b, session="main#0", request_id="main#0/back/finalize/0")
    assert slow["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
    ratio = slow["timings"]["prompt_ms"] / plain["timings"]["prompt_ms"]
    assert ratio == pytest.approx(3, rel=0.05)
    # `degraded` in the same scope: the finalize reports its cache and recomputes it (3x)
    honest = chat(h, a, session="main#0", request_id="main#0/measure/baseline/0")
    lie = chat(h, a, session="main#0", request_id="main#0/back/finalize/1")
    assert cached(lie) == cached(honest) > 0
    assert honest["timings"]["prompt_ms"] < 0.1 * plain["timings"]["prompt_ms"]
    assert lie["timings"]["prompt_ms"] == pytest.approx(3 * plain["timings"]["prompt_ms"],
                                                        rel=0.05)


def test_drift_slows_everything_in_its_window_and_nothing_after(sim):
    """`drift=F` scoped to the finalizes with a window of 1 s: the first request it names opens
    it and is F times slower in prefill and decode, and so is one it does not name served inside
    the window (everything slows); after the window, a request it names costs what one did
    before (one window: a request measured again after it sees the machine as it was)."""
    h = sim("drift=3@*/finalize/*", prefill_us_per_token=50.0, prefill_ctx_scale=0,
            decode_us_per_token=2000.0, drift_seconds=1.0)
    before = chat(h, msgs("p", 400), request_id="main#0/back/baseline/0", max_tokens=4)
    named = chat(h, msgs("q", 400), request_id="main#0/back/finalize/0", max_tokens=4)
    inside = chat(h, msgs("r", 400), request_id="main#0/back/baseline/1", max_tokens=4)
    time.sleep(1.0)
    after = chat(h, msgs("s", 400), request_id="main#1/back/finalize/0", max_tokens=4)
    # the prefill time reported is the modelled one: exact; decode is timed (each token sleeps
    # until it is due, 2 ms after the one before): never shorter than the model by more than a
    # last token sent without sleeping (0.5 ms), and a loaded host only makes it longer, so
    # each is judged against the model, not against another timed decode
    def decode_ms(r: dict, factor: float) -> float:
        return (r["timings"]["predicted_n"] - 1) * 2.0 * factor

    pre = before["timings"]["prompt_ms"]
    assert before["timings"]["predicted_ms"] >= decode_ms(before, 1) - 1 > 0
    for slowed in (named, inside):
        assert slowed["timings"]["prompt_ms"] == pytest.approx(3 * pre, rel=0.01)
        assert slowed["timings"]["predicted_ms"] >= decode_ms(slowed, 3) - 1
    assert after["timings"]["prompt_ms"] == pytest.approx(pre, rel=0.01)
    assert after["timings"]["predicted_ms"] < decode_ms(after, 3) - 1, "the window is over"


@pytest.mark.parametrize("stream", [True, False])
def test_no_cached_report_omits_fields(sim, stream):
    h = sim("no_cached_report")
    prompt = msgs("n", 100)
    chat(h, prompt, stream=stream)
    r = chat(h, prompt, stream=stream)
    assert "prompt_tokens_details" not in r["usage"] and r["usage"]["prompt_tokens"] == 105
    assert "cache_n" not in r["timings"] and "prompt_n" not in r["timings"]
    assert state(h)["counters"]["hit_tokens"] > 0  # the cache still works underneath


def test_omit_cached_when_zero(sim):
    h = sim("omit_cached_when_zero")
    prompt = msgs("z", 100)
    first, second = chat(h, prompt), chat(h, prompt)
    assert "prompt_tokens_details" not in first["usage"] and "cache_n" not in first["timings"]
    assert cached(second) == 96 and second["timings"]["cache_n"] == 96


@pytest.mark.parametrize("stream", [True, False])
def test_no_timings_reports_usage_but_no_server_times(sim, stream):
    """vLLM / SGLang shape: cached tokens in `usage`, no `timings` at all; scoped by session."""
    h = sim("no_timings@quiet")
    prompt = msgs("t", 100)
    chat(h, prompt, session="quiet", stream=stream)
    again = chat(h, prompt, session="quiet", stream=stream)
    assert again["timings"] is None and cached(again) == 96
    other = chat(h, prompt, session="loud", stream=stream)
    assert other["timings"]["prompt_ms"] >= 0 and cached(other) == 96


def test_duplicate_blocks_halve_effective_capacity(sim):
    prompt = msgs("p", 700)  # 705 tokens: 44 full blocks; the device holds 64
    normal = sim(device_tokens=1024)
    chat(normal, prompt)
    assert cached(chat(normal, prompt)) == 44 * 16
    dup = sim("duplicate_blocks", device_tokens=1024)
    chat(dup, prompt)
    s = state(dup)["cache"]
    assert s["blocks"] == 32 and s["used_tokens"] == 1024  # 32 blocks x 2 units fill it
    assert cached(chat(dup, prompt)) == 32 * 16


def test_error_rate_is_seeded_and_scoped(sim):
    h = sim("error_rate=0.5@flaky", seed=7)
    statuses = [chat(h, msgs("e", 10), session="flaky#1", request_id=f"r{i}")["status"]
                for i in range(40)]
    assert set(statuses) == {200, 500} and 8 <= statuses.count(500) <= 32
    again = [chat(h, msgs("e", 10), session="flaky#1", request_id=f"r{i}")["status"]
             for i in range(40)]
    assert again == statuses  # the draw is a function of (seed, X-WL-Request)
    err = chat(h, msgs("e", 10), session="flaky#1", request_id=f"r{statuses.index(500)}")
    assert err["body"]["error"]["code"] == 500
    assert all(chat(h, msgs("e", 10), session="steady#1", request_id=f"r{i}")["status"] == 200
               for i in range(20))
    assert state(h)["counters"]["errors_injected"] == 2 * statuses.count(500) + 1


def test_evict_over_concurrency(sim):
    h = sim("evict_over_concurrency=1", decode_us_per_token=2000.0, slots=4)
    warm = msgs("w", 300)

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{h.base_url}/chat/completions"
            await client.post(url, json={"messages": warm, "max_tokens": 1})
            solo = (await client.post(url, json={"messages": warm, "max_tokens": 1})).json()
            long = asyncio.ensure_future(client.post(url, json={
                "messages": msgs("l", 50), "max_tokens": 100}))
            await asyncio.sleep(0.05)
            crowded = (await client.post(url, json={"messages": warm, "max_tokens": 1})).json()
            await long
            return solo, crowded

    solo, crowded = asyncio.run(scenario())
    assert solo["usage"]["prompt_tokens_details"]["cached_tokens"] == 304  # 305 tokens
    assert crowded["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert state(h)["counters"]["concurrency_evictions"] == 1
