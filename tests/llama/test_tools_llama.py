"""Tool calls, tool results and a reply replayed without its reasoning, sent to a real engine:
llama-server (SmolLM2-135M) takes the OpenAI chat format as the runner sends it, and the turns
after the tool results come back from its prompt cache."""

from __future__ import annotations

import pytest

from runhelp import records, wl_run_text

pytestmark = pytest.mark.llama

AGENT = """
workload tools {
  session main {
    system "You are a coding agent."
    user filler 200
    reply 16 replay content call read_file { path = "src/app.py", lines = filler 12 }
    tool filler 300
    assistant "Two more.", call grep { pattern = "TODO" }, call list_dir
    tool "3 matches"
    tool filler 40
    reply 8 label after
    user "Summarise."
    reply 8 label again
  }
}
"""


def test_llama_server_takes_tool_calls_and_results(tmp_path, llama_server):
    code, res = wl_run_text(tmp_path, AGENT, "--base-url", llama_server.base_url,
                            "--salt", "llama-tools")
    assert code == 0, res.get("gates")
    assert all(r["error"] is None for r in res["records"]), res["records"]
    [after], [again] = records(res, "after"), records(res, "again")
    # the tool results are in the prompt it counted (llama-server's template drops the calls)
    assert after["prompt_tokens"] >= 300 + 40 + 200
    assert again["cached_tokens"] >= after["prompt_tokens"] - 8 and again["hit"] is True
