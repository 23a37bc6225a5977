"""Ground truth on llama-server while this machine is loaded: processes that spin on its CPUs
(`tests/cpuload.py`, started and stopped by PID) over the finalize, over the baselines, or over
both. llama-server runs on the same CPUs, so its prefill and decode slow down with the load and
come back without it: a healthy server stays `ok`, a real eviction (no host-RAM cache) stays
exactly `evicted`. Small sizes: one session, this machine prefills a few hundred tokens a
second when idle. llama-server cannot be made to lie about its cache, so the `degraded` side of
the same ground truth runs on the simulator (tests/e2e/test_groundtruth_busy.py).
"""

from __future__ import annotations

import pytest

from cpuload import placed_load
from runhelp import records, verdicts, wl_run

pytestmark = pytest.mark.llama

SMALL_AGENT = ["--sessions", "1", "--main-tokens", "1k", "--step-tokens", "500",
               "--sub-tokens", "500", "--finalize-tokens", "300", "--max-tokens", "16"]


@pytest.mark.parametrize("where", ["over_finalize", "over_baselines", "both"])
def test_a_healthy_llama_server_is_never_failed_under_a_cpu_load(tmp_path, llama_server, where):
    """Two spinning processes on this machine's two CPUs, over the finalize, its baselines or
    both: the healthy server is never called degraded or evicted and the run never exits 1. It
    is `ok`, or, where the load left the finalize's price a range the repeats did not close,
    `unverified` with `restore` unknown (exit 6), the range in its detail."""
    rec = tmp_path / "r.jsonl"
    with placed_load(rec, where, n=2, url=llama_server.base_url):
        code, res = wl_run(tmp_path, "agent-sim", "--base-url", llama_server.base_url,
                           *SMALL_AGENT, "--salt", f"busy-{where}", "--records", str(rec))
    assert verdicts(res)["main#0"] in ("ok", "unverified"), res["gates"]
    assert code == (0 if verdicts(res)["main#0"] == "ok" else 6)
    failed = [g["name"] for g in res["gates"] if g["severity"] == "fail"
              and g["status"] == "fail"]
    assert failed == [], res["gates"]
    (fin,) = records(res, "finalize")
    assert fin["hit"] and fin["prefill_source"] == "server"


def test_a_real_eviction_stays_evicted_under_a_cpu_load(tmp_path):
    from llama import find_llama, start_llama_server

    binary, model, why = find_llama()
    if binary is None:
        pytest.skip(why)
    server = start_llama_server(binary, model, tmp_path / "llama-nocache.log",
                                extra_args=["--cache-ram", "0"])
    rec = tmp_path / "r.jsonl"
    try:
        with placed_load(rec, "both", n=2):
            code, res = wl_run(tmp_path, "agent-sim", "--base-url", server.base_url,
                               *SMALL_AGENT, "--salt", "busy-evict", "--records", str(rec))
    finally:
        server.stop()
    assert verdicts(res) == {"main#0": "evicted"}, res["gates"]
    assert code == 1
