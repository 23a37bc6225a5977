"""Ground truth for coding-agent, run for real against the simulator: a capacity that keeps
every context passes every gate; one that holds an agent's own context but not that context
together with what its sub-agents read evicts it while the sub-agents run, and only the gate
on the turn after them fails, with its verdict.

The simulator's device cache is an LRU of blocks with no host tier here (`--sim-host-tokens
0`), so what it can keep is set by `--sim-device-tokens`. The sizes drawn at random (tool
results, what a sub-agent reads) are fixed by the salt: with `gt-agent` the agent's context is
at most 3,341 tokens, and its two sub-agents send 12,662 new tokens after its last turn.
"""

from __future__ import annotations

import pytest

from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

SMALL = ["--system-tokens", "500", "--tools-tokens", "500", "--tasks", "1",
         "--task-tokens", "300", "--search-tokens", "300", "--read-tokens", "600",
         "--edit-tokens", "100", "--test-tokens", "200", "--subagents", "2",
         "--sub-tokens", "3k", "--report-tokens", "100", "--drafts", "2", "--tool-time", "10ms",
         "--think", "10ms", "--max-tokens", "16", "--salt", "gt-agent", "--sim-host-tokens", "0"]


def statuses(res: dict) -> dict[str, str]:
    return {g["name"]: g["status"] for g in res["gates"]}


def test_coding_agents_kept_when_everything_fits(tmp_path):
    """Two agents side by side, each with two sub-agents and two drafts in flight: all kept."""
    code, res = wl_run(tmp_path, "coding-agent", "--sim", *SMALL, "--sessions", "2",
                       "--sim-device-tokens", "1000000")
    assert statuses(res) == {"shared": "pass", "resumed": "pass", "kept": "pass"}, res["gates"]
    assert code == 0 and verdicts(res) == {"agent#0": "ok", "agent#1": "ok"}
    assert len(records(res, "explore")) == 4
    assert all(r["cached_tokens"] >= 1000 for r in records(res, "explore"))  # the shared prefix
    assert all(r["error"] is None for r in res["records"])


def test_the_agents_context_evicted_by_its_sub_agents(tmp_path):
    """5,000 tokens hold the agent's context (at most 3,341) but not with the 12,662 new tokens
    its sub-agents send after its last turn: the turn after them finds only what they shared with
    it; the sub-agents are served the shared prompt, and once back the agent's tool loop is
    kept."""
    code, res = wl_run(tmp_path, "coding-agent", "--sim", *SMALL, "--sessions", "1",
                       "--sim-device-tokens", "5000")
    assert statuses(res) == {"shared": "pass", "resumed": "fail", "kept": "pass"}, res["gates"]
    assert code == 1 and verdicts(res) == {"agent#0": "evicted_by_subagents"}
    [resume] = records(res, "resume")
    assert resume["reuse"] < 0.6 and resume["cached_tokens"] <= 1100
    assert gate(res, "resumed")["verdict"] == "evicted_by_subagents"
