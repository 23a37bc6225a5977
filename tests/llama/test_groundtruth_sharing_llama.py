"""The sharing workloads (shared-prompt, tenant-flood, idle-resume) on a real engine:
llama-server (SmolLM2-135M Q4_1, one slot, its host-RAM prompt cache on), at a few thousand
tokens each. Each runs end to end with every gate judged from the engine's own counts; what a
healthy one-slot llama-server keeps (the shared system prompt, a victim after a few small
tenants, sessions after a little traffic) must pass.
"""

from __future__ import annotations

import pytest

from runhelp import gate, records, wl_run

pytestmark = pytest.mark.llama

USAGE = "usage.prompt_tokens_details.cached_tokens"


def judged(res: dict) -> None:
    """Every gate judged on every scope it has, from counts the engine reported."""
    for g in res["gates"]:
        assert g["unknown"] == 0 and all(r["status"] != "unknown" for r in g["results"]), g
    answered = [r for r in res["records"] if not r["skipped"]]
    assert answered and all(r["error"] is None for r in answered)
    assert all(r["cached_source"] == USAGE for r in answered)


def test_shared_prompt_on_llama_server(tmp_path, llama_server):
    """One slot, three sessions taking turns: the system prompt they share is in the slot
    whoever ran last, so every session that joins is served it. (Their histories come back
    only in part here: the slot holds the last session's, and `private` says what the
    engine's counts show.)"""
    code, res = wl_run(tmp_path, "shared-prompt", "--base-url", llama_server.base_url,
                       "--sessions", "3", "--system-tokens", "500", "--turn-tokens", "100",
                       "--turns", "2", "--max-tokens", "8", "--salt", "llama-shared")
    judged(res)
    assert gate(res, "shared")["status"] == "pass"
    assert all(r["cached_tokens"] >= 500 for r in records(res, "joined"))
    assert code == (0 if gate(res, "private")["status"] == "pass" else 1)


def test_tenant_flood_on_llama_server(tmp_path, llama_server):
    code, res = wl_run(tmp_path, "tenant-flood", "--base-url", llama_server.base_url,
                       "--victim-tokens", "1000", "--step-tokens", "250", "--think", "300ms",
                       "--rate", "5", "--tenants", "5", "--tenant-tokens", "250",
                       "--max-tokens", "8", "--salt", "llama-flood")
    judged(res)
    assert res["client"]["scheduled"] == 5
    assert gate(res, "kept")["status"] == "pass" and code == 0


def test_idle_resume_on_llama_server(tmp_path, llama_server):
    code, res = wl_run(tmp_path, "idle-resume", "--base-url", llama_server.base_url,
                       "--sessions", "2", "--fill-tokens", "600", "--step-tokens", "300",
                       "--idle", "1s", "--traffic-rate", "3", "--traffic-tokens", "250",
                       "--max-tokens", "8", "--salt", "llama-idle")
    judged(res)
    assert len(records(res, "traffic")) == 3
    assert gate(res, "kept")["status"] == "pass" and code == 0
