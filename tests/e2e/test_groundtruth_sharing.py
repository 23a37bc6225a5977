"""Ground truth for the sharing workloads (shared-prompt, tenant-flood, idle-resume), run for
real against the simulator: a capacity that keeps what they measure must pass, one that cannot
hold it must give the failing verdict, for the reason the capacity forces.

The simulator's device cache is an LRU of blocks with no host tier here (`--sim-host-tokens
0`), so what it can keep is set by `--sim-device-tokens`.
"""

from __future__ import annotations

import pytest

from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

NO_HOST = ["--sim-host-tokens", "0"]
SHARED = ["--sessions", "4", "--system-tokens", "2k", "--turn-tokens", "1k", "--turns", "3",
          "--max-tokens", "16", "--salt", "gt-shared", *NO_HOST]


def statuses(res: dict) -> dict[str, str]:
    return {g["name"]: g["status"] for g in res["gates"]}


def test_shared_prompt_kept_when_everything_fits(tmp_path):
    code, res = wl_run(tmp_path, "shared-prompt", "--sim", *SHARED,
                       "--sim-device-tokens", "1000000")
    assert statuses(res) == {"shared": "pass", "private": "pass"} and code == 0
    joined = records(res, "joined")
    assert len(joined) == 3 and all(r["cached_tokens"] >= 2000 for r in joined)
    assert set(verdicts(res).values()) == {"ok"}


def test_shared_prompt_histories_lost_when_only_the_prompt_fits(tmp_path):
    """2,400 tokens hold the 2,021-token shared prefix, not a history past it (3,000+): every
    private turn misses, the shared prefix still comes from the cache."""
    code, res = wl_run(tmp_path, "shared-prompt", "--sim", *SHARED, "--sim-device-tokens", "2400")
    assert statuses(res) == {"shared": "pass", "private": "fail"} and code == 1
    assert set(verdicts(res).values()) == {"history_lost"}
    assert all(r["reuse"] < 0.9 for r in records(res, "private"))


def test_shared_prompt_recomputed_when_the_prompt_does_not_fit(tmp_path):
    code, res = wl_run(tmp_path, "shared-prompt", "--sim", *SHARED, "--sim-device-tokens", "1500")
    assert statuses(res) == {"shared": "fail", "private": "fail"} and code == 1
    assert all(r["cached_tokens"] <= 1500 for r in records(res, "joined"))


FLOOD = ["--victim-tokens", "8k", "--step-tokens", "1k", "--think", "500ms", "--rate", "20",
         "--tenants", "40", "--tenant-tokens", "2k", "--salt", "gt-flood", *NO_HOST]


def test_tenant_flood_victim_kept_when_everything_fits(tmp_path):
    code, res = wl_run(tmp_path, "tenant-flood", "--sim", *FLOOD, "--sim-device-tokens", "1000000")
    assert statuses(res) == {"kept": "pass", "on_time": "pass"} and code == 0
    assert res["client"]["scheduled"] == 40


def test_tenant_flood_victim_evicted_when_the_flood_overflows_the_cache(tmp_path):
    """12,000 tokens hold the victim's 8k context alone, not with the ~10 tenants of 2k that
    arrive in each of its half-second pauses: a turn after a pause finds its context gone."""
    code, res = wl_run(tmp_path, "tenant-flood", "--sim", *FLOOD, "--sim-device-tokens", "12000")
    assert statuses(res)["kept"] == "fail" and code == 1
    grow = [r for r in records(res, "grow") if r["reuse"] is not None]
    assert min(r["reuse"] for r in grow) < 0.5
    assert gate(res, "kept")["verdict"] == "victim_evicted"


IDLE = ["--sessions", "2", "--fill-tokens", "4k", "--step-tokens", "2k", "--idle", "1s",
        "--traffic-rate", "6", "--traffic-tokens", "2k", "--salt", "gt-idle", *NO_HOST]


@pytest.mark.parametrize("device, verdict", [(40000, "ok"), (8000, "evicted")])
def test_idle_resume_kept_or_evicted_by_the_traffic_meanwhile(tmp_path, device, verdict):
    """The two sessions' 8k fit in 40,000 tokens with the 12k of other traffic; in 8,000 the
    traffic alone overflows the cache, and every resumed context is gone."""
    code, res = wl_run(tmp_path, "idle-resume", "--sim", *IDLE, "--sim-device-tokens", str(device))
    assert verdicts(res) == {"user#0": verdict, "user#1": verdict}
    assert code == (0 if verdict == "ok" else 1)
    traffic = records(res, "traffic")
    resumed = records(res, "resume")
    assert len(traffic) == 6 and sum(r["prompt_tokens"] for r in traffic) > 12000
    assert min(r["t_start_s"] for r in resumed) > max(r["t_start_s"] + r["e2e_s"] for r in traffic)


LITERAL = """workload literal {
  session s repeat 3 {
    system "You are a careful assistant who answers in one sentence and never uses lists, tables or markdown of any kind, whatever the question. You cite nothing, you do not apologise, you never repeat the question back, and you stop as soon as the answer is given. When you are not sure, you say so in a few words and give your best guess."
    user filler 100
    reply 8
  }
  gates { sane: overall all(cold_ok{}) }
}"""


def test_a_literal_prompt_served_across_concurrent_sessions_is_within_the_plan(tmp_path):
    """Three concurrent sessions with one literal system prompt, on a one-slot simulator: the
    later ones are served the prompt the first left in the cache. The plan says they may be
    (`exp. max`, `planned_expected_max` in the records), so the sanity check that a cold
    request was not served more than planned holds."""
    from runhelp import wl_run_text

    code, res = wl_run_text(tmp_path, LITERAL, "--sim", "--sim-slots", "1", "--salt", "lit")
    served = [r for r in res["records"] if r["cached_tokens"]]
    assert len(served) == 2, res["records"]
    for r in res["records"]:
        assert r["planned_expected_cached"] == 0 and r["planned_expected_max"] >= 64
        assert r["cached_tokens"] <= r["planned_expected_max"]
    assert gate(res, "sane")["status"] == "pass" and code == 0
