"""coding-agent on a real engine: llama-server (SmolLM2-135M Q4_1, one slot, its host-RAM
prompt cache on) at a few thousand tokens. An agent with two sub-agents and two drafts runs
end to end: the tool calls and results in the OpenAI chat format are taken, every gate is
judged from the engine's own counts, and every sub-agent is served the system prompt and tool
schema that every request of the run starts with (whichever conversation the one slot last
held). Whether the agent's own context survives its sub-agents on one slot is the engine's
answer, judged either way (the exit code follows the gates)."""

from __future__ import annotations

import pytest

from runhelp import gate, records, wl_run

pytestmark = pytest.mark.llama

USAGE = "usage.prompt_tokens_details.cached_tokens"


def test_coding_agent_on_llama_server(tmp_path, llama_server):
    code, res = wl_run(tmp_path, "coding-agent", "--base-url", llama_server.base_url,
                       "--sessions", "1", "--system-tokens", "200", "--tools-tokens", "200",
                       "--tasks", "1", "--task-tokens", "50", "--search-tokens", "50",
                       "--read-tokens", "150", "--edit-tokens", "30", "--test-tokens", "50",
                       "--subagents", "2", "--sub-tokens", "150", "--report-tokens", "30",
                       "--drafts", "2", "--tool-time", "10ms", "--think", "10ms",
                       "--max-tokens", "2", "--salt", "llama-agent")
    answered = [r for r in res["records"] if not r["skipped"]]
    assert len(answered) == len(res["records"]) == 11
    assert all(r["error"] is None and r["cached_source"] == USAGE for r in answered), answered
    for g in res["gates"]:
        assert g["unknown"] == 0 and all(r["status"] != "unknown" for r in g["results"]), g
    assert gate(res, "shared")["status"] == "pass"
    assert all(r["cached_tokens"] >= 400 for r in records(res, "explore"))
    failed = [g["name"] for g in res["gates"] if g["status"] == "fail"]
    assert code == (1 if failed else 0), failed
