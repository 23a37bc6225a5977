"""Ground truth: the bundled benchmarks, run for real against the simulator (whose capacity,
speeds and faults are known), must reach the right verdicts."""

from __future__ import annotations

import pytest

from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

# Small, but shaped like agent work: a context much larger than each new step, so a reported
# hit that was really recomputed is visible in timing (cold/warm cost ratio >= 8).
AGENT_SMALL = ["--sessions", "3", "--main-tokens", "8k", "--step-tokens", "1k",
               "--sub-tokens", "1500", "--finalize-tokens", "500", "--max-tokens", "16",
               "--sim-prefill-us-per-token", "40", "--sim-decode-us-per-token", "100"]


# ---------------------------------------------------------------- cache-pressure


@pytest.mark.parametrize("context", [500, 1000, 2000])
def test_cache_pressure_retains_the_device_capacity(tmp_path, context):
    capacity = 16384
    code, res = wl_run(tmp_path, "cache-pressure", "--sim", "--kv-size", str(capacity),
                       "--context-tokens", str(context), "--sim-device-tokens", str(capacity),
                       "--sim-host-tokens", "0")
    assert code == 0, res.get("gates")
    retained = res["report"]["retained_tokens"]
    assert abs(retained - capacity) <= context + 64, (retained, capacity)
    verify = records(res, "verify")
    hits = [r for r in verify if r["hit"]]
    assert verify[len(hits)]["hit"] is False, "the walk stops at the first miss"
    assert all(r["hit_basis"] == "cached" for r in verify if not r["skipped"])


def test_cache_pressure_counts_the_host_tier(tmp_path):
    device, host, context = 8192, 8192, 1000
    code, res = wl_run(tmp_path, "cache-pressure", "--sim", "--kv-size", str(device),
                       "--context-tokens", str(context), "--sim-device-tokens", str(device),
                       "--sim-host-tokens", str(host), "--margin", "12")
    retained = res["report"]["retained_tokens"]
    assert abs(retained - (device + host)) <= context + 64, retained


def test_cache_pressure_error_in_verify_is_an_error_not_an_eviction(tmp_path):
    code, res = wl_run(tmp_path, "cache-pressure", "--sim", "--kv-size", "16384",
                       "--context-tokens", "500", "--sim-device-tokens", "65536",
                       "--sim-fault", "error_rate=0.25", "--sim-seed", "3")
    verify = records(res, "verify")
    errored = [r for r in verify if r["error"]]
    assert errored, "the seeded fault should hit some verify requests"
    assert all(r["hit"] is None for r in errored), "an error is neither hit nor miss"
    assert not any(r["hit"] is False for r in verify), "nothing was evicted"
    assert not any(r["skipped"] and "until" in r["skipped"] for r in verify), "errors do not stop"
    failed_hydrate = {r["index"] for r in records(res, "ctx") if r["error"]}
    for r in verify:
        if r["index"] in failed_hydrate:
            assert r["skipped"] and "failed" in r["skipped"], "a never-hydrated context is not re-sent"
    assert gate(res, "no_errors")["status"] == "fail"
    assert code == 1


# ---------------------------------------------------------------- agent-sim


def test_agent_sim_healthy_simulator_every_session_ok(tmp_path):
    """Also: the simulator says its prefill time is each request's own (`/props`), so the
    sessions prefilling side by side leave the speed gate judged (before, it read `unknown`
    for every session: its prefill times were taken as possibly shared)."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL)
    assert verdicts(res) == {"main#0": "ok", "main#1": "ok", "main#2": "ok"}
    assert code == 0
    assert (res["engine"]["slots"], res["engine"]["prefill_own"]) == (4, True)
    server = [r for r in res["records"] if r["prefill_source"] == "server"]
    assert server and all(r["prefill_contended_s"] == 0 for r in server)
    assert {r["status"] for r in gate(res, "speed")["results"]} == {"pass"}


def test_agent_sim_degraded_fault_only_in_the_affected_session(tmp_path):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL,
                       "--sim-fault", "degraded@main#1")
    assert verdicts(res) == {"main#0": "ok", "main#1": "degraded", "main#2": "ok"}
    assert code == 1


def test_agent_sim_queueing_without_server_times_is_not_called_slow(tmp_path):
    """An engine with no prefill time of its own (vLLM / SGLang shape) and one slot: requests
    queue behind each other, and a TTFT holds that wait. The finalize and its baseline are
    timed alone (`isolated`): no other request of the run is in flight in their TTFTs, so they
    are judged, not left unknown, and the healthy engine is ok. (Over the client's TTFT, a 2k
    finalize: 500 tokens at 40 us each are too few to price a token apart from a busy host's
    noise, and `restore` would be undecidable.)"""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", "--sim-fault", "no_timings",
                       "--sim-slots", "1", *AGENT_SMALL, "--finalize-tokens", "2k")
    assert code == 0 and verdicts(res) == {"main#0": "ok", "main#1": "ok", "main#2": "ok"}
    finals = records(res, "finalize") + records(res, "baseline")
    assert all(r["prefill_source"] == "client_ttft" and r["isolated"] for r in finals)
    assert all(r["ttft_contended_s"] == 0 for r in finals)
    assert max(r["ttft_contended_s"] for r in records(res, "sub")) > 0  # the others queue
    assert {r["status"] for r in gate(res, "speed")["results"]} == {"pass"}


def test_agent_sim_degraded_without_server_times_is_still_caught_where_alone(tmp_path):
    """The same engine shape recomputing in one session: where its request's wait was its
    own (nothing else in flight), the TTFT still shows the recompute."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL,
                       "--sim-fault", "degraded@main#1", "--sim-fault", "no_timings")
    assert verdicts(res)["main#1"] == "degraded"
    caught = [r for r in records(res, "main") + records(res, "finalize")
              if r["session"] == "main#1" and r["ttft_agrees"] is False]
    assert caught and all(r["ttft_s"] - (r["ttft_contended_s"] or 0) - (r["ttft_late_s"] or 0)
                          > 0.1 for r in caught)
    assert code == 1


def test_agent_sim_no_cached_report_is_unverified_not_ok(tmp_path, capsys):
    """No gate failed and one could not be judged: exit 6 (UNVERIFIED), neither the pass of
    0 nor the failure of 1, and the summary line says so and which gates."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL,
                       "--sim-fault", "no_cached_report@main#2")
    v = verdicts(res)
    assert v["main#0"] == "ok" and v["main#1"] == "ok"
    assert "unverified" in v["main#2"]
    assert code == res["exit_code"] == 6
    footer = capsys.readouterr().out.strip().splitlines()[-1]
    assert footer.startswith("UNVERIFIED (no gate failed; survival could not be judged in 1 of "
                             "3 scope(s)"), footer


def test_agent_sim_eviction_by_sub_agents_is_evicted(tmp_path):
    # One session; the device holds the 8k main context or a 6k sub, not both: the subs push
    # the main context out, and the finalize must be judged evicted.
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL, "--sessions", "1",
                       "--sub-tokens", "6k", "--sim-device-tokens", "9216",
                       "--sim-host-tokens", "0")
    assert verdicts(res) == {"main#0": "evicted"}
    fin = records(res, "finalize")[0]
    assert fin["cached_tokens"] < 0.66 * fin["expected_cached"]
    assert code == 1


# ---------------------------------------------------------------- abort-sim


ABORT_SMALL = ["--context-tokens", "2k", "--thinking-tokens", "50", "--max-tokens", "2000",
               "--settle", "100ms"]


def test_abort_sim_healthy_passes_and_aborts_exactly(tmp_path):
    code, res = wl_run(tmp_path, "abort-sim", "--sim", *ABORT_SMALL)
    primes = records(res, "prime")
    assert [p["streamed_tokens"] for p in primes] == [50, 50]
    assert all(p["aborted"] for p in primes)
    assert all(r["reuse"] >= 0.95 for r in records(res, "reprompt"))
    # one simulator token per filler word: chars per token is the filler's mean word length + 1
    assert 4 < res["calibration"]["chars_per_token"] < 9
    assert code == 0


def test_abort_sim_drop_on_abort_fails(tmp_path):
    code, res = wl_run(tmp_path, "abort-sim", "--sim", *ABORT_SMALL, "--sim-fault", "drop_aborted")
    assert gate(res, "reuse")["status"] == "fail"
    assert code == 1


# ---------------------------------------------------------------- needle-test


def test_needle_passes_inside_the_limit_and_fails_beyond(tmp_path):
    code, res = wl_run(tmp_path, "needle-test", "--sim", "--lengths", "2k,8k,60k",
                       "--sim-effective-context", "10000")
    found = {r["prompt_tokens"] // 1000: r["expect_ok"] for r in records(res, "needle")}
    assert found == {2: True, 8: True, 60: False}, found  # 80 % depth: 12k from the end
    assert code == 1
    code, res = wl_run(tmp_path, "needle-test", "--sim", "--lengths", "2k,8k",
                       "--sim-effective-context", "10000")
    assert code == 0


# ---------------------------------------------------------------- perf-sim


def test_perf_sim_reproduces_configured_speeds(tmp_path):
    us, scale, decode_us = 20.0, 32768.0, 2000.0
    code, res = wl_run(tmp_path, "perf-sim", "--sim", "--step-tokens", "8k", "--runs", "2",
                       "--output-tokens", "64", "--context-limit", "40k",
                       "--sim-prefill-us-per-token", str(us), "--sim-prefill-ctx-scale",
                       str(scale), "--sim-decode-us-per-token", str(decode_us),
                       "--sim-decode-ctx-scale", "0")
    assert code == 0
    levels = records(res, "level")
    first_run = [r for r in levels if r["seq"] < len(levels) // 2]
    for r in levels:
        cached, prompt = r["cached_tokens"], r["prompt_tokens"]
        # the configured cost of prefilling positions cached..prompt
        cost_us = us * ((prompt - cached) + (prompt**2 - cached**2) / (2 * scale))
        expected_pp = (prompt - cached) / (cost_us / 1e6)
        assert r["pp_tps"] == pytest.approx(expected_pp, rel=0.10), r["id"]
        assert r["tg_tps"] == pytest.approx(1e6 / decode_us, rel=0.10), r["id"]
    second_run_first = levels[len(first_run)]
    assert second_run_first["index"] == 0
    assert second_run_first["cached_tokens"] < 64, "every run starts cold (fresh filler)"


def test_agent_sim_evict_over_concurrency_is_evicted_where_the_prefix_was_lost(tmp_path):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *AGENT_SMALL,
                       "--sim-fault", "evict_over_concurrency=1")
    v = verdicts(res)
    assert "evicted" in v.values(), v
    for fin in records(res, "finalize"):
        lost = fin["cached_tokens"] < 0.66 * fin["expected_cached"]
        assert ("evicted" in v[fin["session"]]) == lost, (fin["session"], v)
    assert not any("degraded" in x for x in v.values()), "an eviction is not a slowdown"
    assert code == 1


def test_cache_pressure_duplicate_blocks_halve_the_retained_capacity(tmp_path):
    capacity, context = 16384, 1000
    code, res = wl_run(tmp_path, "cache-pressure", "--sim", "--kv-size", str(capacity),
                       "--context-tokens", str(context), "--sim-device-tokens", str(capacity),
                       "--sim-host-tokens", "0", "--sim-fault", "duplicate_blocks")
    retained = res["report"]["retained_tokens"]
    assert abs(retained - capacity / 2) <= context + 64, retained
    assert [g["status"] for g in res["gates"] if g["name"] == "retained"] == ["fail"]


# ---------------------------------------------------------------- a workload without calibration

# Its cold prefill speed is learned from the run's own requests. Most of them are small (300
# tokens), on an engine that prefills 100k tokens/s but costs 20 ms before any first token
# (scheduling, the first decode step) and reports no prefill time of its own.
LEARNT = """
workload learnt {
  concurrency = 1
  session chat repeat 6 { turn ask { user filler 300; reply 16 } }
  session cold repeat 3 { turn big { user filler 8k; reply 16 } }
  session main {
    system "You are a helpful assistant."
    turn big { user filler 8k; reply 16 }
    turn reread isolated { probe }
  }
  gates {
    timing: each session count(ttft_disagrees{reread}) == 0 -> degraded
  }
}
"""


@pytest.mark.parametrize("fault", [None, "degraded"])
def test_a_recompute_is_caught_by_a_speed_learned_from_small_requests(tmp_path, fault):
    """Over whole TTFTs the small requests would say about 12k tokens/s, a cold prefill of the
    8k context 700 ms, and its recompute (~110 ms) would pass for a hit: `ok` for an engine that
    recomputes what it reports cached."""
    from runhelp import wl_run_text

    faults = ["--sim-fault", "no_timings"] + (["--sim-fault", fault] if fault else [])
    code, res = wl_run_text(tmp_path, LEARNT, "--sim", "--sim-prefill-us-per-token", "10",
                            "--sim-prefill-ctx-scale", "0", "--sim-first-token-us", "20000",
                            *faults)
    assert res["calibration"]["cold_prefill_tps"] == []
    reread = records(res, "reread")[0]
    assert reread["prefill_source"] == "client_ttft" and reread["reuse"] > 0.99
    assert reread["ttft_agrees"] is (fault is None), reread
    assert verdicts(res) == {"main#0": "degraded" if fault else "ok"}, res["gates"]
    assert code == (1 if fault else 0)
