"""Ground truth on a real engine: llama-server (SmolLM2-135M Q4_1, one slot, prompt cache on;
another server without its host-RAM cache for a real eviction).

Small sizes: this machine prefills a few hundred tokens per second. A healthy server must be
judged healthy (these are the cases where the original tool raised false alarms), and a real
eviction must be called one.
"""

from __future__ import annotations

import pytest

from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.llama


def test_agent_sim_healthy_llama_server_is_ok(tmp_path, llama_server):
    # The original's shape at half its sizes (its own sizes, on its own server set-up, are
    # test_reference_llama's): 2 sessions, a 1.5k main context grown in 500-token steps, 750-token
    # sub-agents and a 1k finalize. The original called such finalizes "degraded" (unequal suffix
    # work). One slot: every sub-agent takes the main context's slot, and the host-RAM cache
    # brings it back.
    code, res = wl_run(tmp_path, "agent-sim", "--base-url", llama_server.base_url,
                       "--sessions", "2", "--main-tokens", "1500", "--step-tokens", "500",
                       "--sub-tokens", "750", "--finalize-tokens", "1k", "--max-tokens", "16",
                       "--salt", "llama-agent")
    assert verdicts(res) == {"main#0": "ok", "main#1": "ok"}, res["gates"]
    fins = records(res, "finalize")
    assert all(f["cached_source"] == "usage.prompt_tokens_details.cached_tokens" for f in fins)
    assert all(f["prefill_source"] == "server" for f in fins)
    every_gate_is_known(res)
    # the engine's own counters, read before and after (the last read comes on a pooled
    # connection the server may have closed: the retry on a fresh connection must get it)
    m = res["metrics"]
    assert [s["at"] for s in m["snapshots"]] == ["start", "after back", "after measure", "end"]
    assert m["engine_queries_tokens"] == m["records_prompt_tokens"]
    assert m["engine_hits_tokens"] == m["records_cached_tokens"]
    assert code == 0


def every_gate_is_known(res: dict, held: tuple[str, ...] = ("restore", "speed", "timing")) -> None:
    """Every gate, `speed` included, judged for every session: the requests they read were
    timed alone, so no value is a range and none is unknown; the gates `held` pass in every
    session."""
    for g in res["gates"]:
        assert g["status"] != "unknown" and g["unknown"] == 0, g
    for name in held:
        assert all(r["status"] == "pass" for r in gate(res, name)["results"]), gate(res, name)


def test_abort_sim_healthy_llama_server_passes(tmp_path, llama_server):
    code, res = wl_run(tmp_path, "abort-sim", "--base-url", llama_server.base_url,
                       "--context-tokens", "1000", "--thinking-tokens", "50",
                       "--max-tokens", "2000", "--ignore-eos", "true", "--salt", "llama-abort")
    primes = records(res, "prime")
    assert [p["streamed_tokens"] for p in primes] == [50, 50], "the abort point is exact"
    assert gate(res, "reuse")["status"] == "pass"
    assert code == 0


def test_needle_found_at_hundreds_to_thousands_of_tokens(tmp_path, llama_server):
    # SmolLM2-135M is a weak reader: it finds the needle in roughly half of the haystacks we
    # tried. This salt's haystacks are ones it reads, so the test checks the pipeline (needle
    # placement, sizing, greedy decoding, the reply check) against a real engine.
    code, res = wl_run(tmp_path, "needle-test", "--base-url", llama_server.base_url,
                       "--lengths", "500,2000", "--needle-pos", "95%", "--temperature", "0",
                       "--salt", "n2")
    assert [r["expect_ok"] for r in records(res, "needle")] == [True, True]
    assert code == 0


def test_a_multi_slot_llama_server_shares_its_batches_and_is_not_called_degraded(
        tmp_path, llama_server):  # the fixture: skipped (or failed in CI) without the binary
    """llama-server's default runs several slots at once; a prefill's own `prompt_ms` then holds
    the batches it shared with the other slots' work (5-16 s for 512-token steps at 3 slots
    here, where 1.5 s alone). With 3 sessions x a 6k context this called a healthy server
    `degraded` (all 3 sessions). Discovery reads the slot count (`/props total_slots`) and a
    record carries the time others were in flight within its prefill (`prefill_contended_s`),
    which the timing check allows for. Smaller here: 2 slots, 2 sessions in lockstep."""
    from llama import find_llama, start_llama_server

    binary, model, _ = find_llama()
    server = start_llama_server(binary, model, tmp_path / "llama-np2.log",
                                extra_args=["-c", "16384", "-np", "2"])
    try:
        code, res = wl_run(tmp_path, "agent-sim", "--base-url", server.base_url,
                           "--sessions", "2", "--main-tokens", "2k", "--step-tokens", "500",
                           "--sub-tokens", "500", "--finalize-tokens", "300", "--max-tokens", "8",
                           "--salt", "llama-np2")
    finally:
        server.stop()
    assert res["engine"]["slots"] == 2
    warm = [r for r in res["records"] if r["hit"]]
    assert warm and all(r["prefill_source"] == "server" for r in warm)
    shared = [r for r in warm if (r["prefill_contended_s"] or 0) > 0]
    assert shared, "two sessions in lockstep share the engine's batches"
    assert all(r["prefill_contended_s"] <= r["server_prefill_ms"] / 1000 + 1e-6 for r in shared)
    assert verdicts(res) == {"main#0": "ok", "main#1": "ok"}, res["gates"]
    # its finalize and baselines were timed alone: nothing shared, every gate judged. `speed`
    # (a warning) compares one 300-token prefill of about a second with 1.75x its fastest
    # baseline: judged here, but held only by the single-slot test above, since a loaded host's
    # drift of a second moves it
    every_gate_is_known(res, held=("restore", "timing"))
    assert all(r["prefill_contended_s"] == 0 for r in records(res, "finalize"))
    assert code == 0


# One session whose sub-agents take the only slot: with the host-RAM prompt cache (the
# default) the main context is saved and comes back; without it (`--cache-ram 0`) it is lost.
SMALL_AGENT = ["--sessions", "1", "--main-tokens", "1k", "--step-tokens", "500",
               "--sub-tokens", "500", "--finalize-tokens", "300", "--max-tokens", "8"]


def test_a_real_eviction_is_called_evicted_and_its_control_ok(tmp_path, llama_server):
    """A true positive on a real engine, beside its control on the shared server: the same
    workload, the same engine, only the host-RAM cache removed."""
    from llama import find_llama, start_llama_server

    code, res = wl_run(tmp_path, "agent-sim", "--base-url", llama_server.base_url,
                       *SMALL_AGENT, "--salt", "llama-control")
    assert verdicts(res) == {"main#0": "ok"} and code == 0, res["gates"]
    binary, model, _ = find_llama()
    server = start_llama_server(binary, model, tmp_path / "llama-nocache.log",
                                extra_args=["--cache-ram", "0"])
    try:
        code, res = wl_run(tmp_path, "agent-sim", "--base-url", server.base_url,
                           *SMALL_AGENT, "--salt", "llama-evict")
    finally:
        server.stop()
    assert verdicts(res) == {"main#0": "evicted"}, res["gates"]
    fin = records(res, "finalize")[0]
    assert fin["hit"] is False and fin["cached_tokens"] < 0.1 * fin["expected_cached"]
    assert fin["cached_source"] == "usage.prompt_tokens_details.cached_tokens"
    assert gate(res, "survival")["status"] == "fail" and code == 1


def test_perf_sim_speeds_agree_with_the_engine_s_own_times(tmp_path, llama_server):
    """pp over the uncached tokens of the client's TTFT; the engine's own prefill time of the
    same tokens bounds it from above (the TTFT holds it) and, on an idle one-slot engine,
    closely from below. Each run is a fresh conversation, growing under the context limit."""
    code, res = wl_run(tmp_path, "perf-sim", "--base-url", llama_server.base_url,
                       "--step-tokens", "500", "--output-tokens", "32", "--runs", "2",
                       "--context-limit", "2k", "--salt", "llama-perf")
    assert code == 0
    levels = records(res, "level")
    assert len(levels) == 6 and [r["index"] for r in levels] == [0, 1, 2] * 2
    assert [r["hit"] for r in levels] == [None, True, True] * 2  # level 0 is cold
    for r in levels:
        engine_pp = r["uncached_tokens"] / (r["server_prefill_ms"] / 1000)
        assert 0.8 * engine_pp <= r["pp_tps"] <= engine_pp * 1.001, r
        assert r["tg_tps"] and r["completion_tokens"] == 32
    assert res["report"]["context"]["2"] > res["report"]["context"]["1"] > 1000
