"""The engine's own prefix-cache counters beside the records, end to end on the simulator: a
run alone on the engine matches them; one that shares the engine with another client says so
(a cache that competed with traffic the run does not see)."""

from __future__ import annotations

import threading

import httpx

from runhelp import wl_run_text
from workloadlang.sim import SimConfig, start_in_thread

WORKLOAD = """
workload alone {
  session s { repeat 6 label step { user filler 300; reply 4 } }
}
"""


def other_client(base_url: str, stop: threading.Event, sent: list[int]) -> None:
    """Another user of the engine: distinct 1,000-word prompts until told to stop."""
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            words = " ".join(f"other{len(sent)}w{i}" for i in range(1000))
            client.post(f"{base_url}/chat/completions", json={
                "messages": [{"role": "user", "content": words}], "max_tokens": 1})
            sent.append(1)


def test_a_run_alone_matches_the_engines_counters(tmp_path, capsys) -> None:
    with start_in_thread(SimConfig(decode_us_per_token=2000)) as sim:
        code, res = wl_run_text(tmp_path, WORKLOAD, "--base-url", sim.base_url)
    m = res["metrics"]
    assert code == 0 and m["engine_queries_tokens"] == m["records_prompt_tokens"] > 0
    out = capsys.readouterr().out
    assert "engine counters over the run [vllm]:" in out and "another client" not in out


def test_another_client_of_the_engine_is_noted(tmp_path, capsys) -> None:
    stop, sent = threading.Event(), []
    with start_in_thread(SimConfig(decode_us_per_token=2000)) as sim:
        worker = threading.Thread(target=other_client, args=(sim.base_url, stop, sent))
        worker.start()
        try:
            code, res = wl_run_text(tmp_path, WORKLOAD, "--base-url", sim.base_url)
        finally:
            stop.set()
            worker.join()
    m = res["metrics"]
    assert sent and m["engine_queries_tokens"] > m["records_prompt_tokens"] + 1000
    out = capsys.readouterr().out
    assert "NOTE: the engine looked up" in out and "another client of the engine" in out
