"""`wl run`'s load options as a user runs them, where nothing is read from time (they run beside
the rest of the suite; the rate ground truth is test_groundtruth_rate.py):

- a duration that ends the run, turns that wait for their predecessor and record the lag;
- the bundled workloads report the new metrics with their files unchanged;
- bad input (an SLO in a wrong unit, a rate of 0, a negative duration, a search that cannot be
  run) is refused before any request is sent, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faultserver import FaultServer
from runhelp import wl_run, wl_run_text
from workloadlang.cli.main import main

# ---------------------------------------------------------------- duration and turns


def test_the_duration_ends_the_run_and_the_run_is_complete(tmp_path: Path) -> None:
    text = """
workload d {
  duration = 1500ms
  session s { repeat 5 label step { user "x"; reply 2; wait 500ms } }
}
"""
    code, res = wl_run_text(tmp_path, text, "--sim")
    assert code == 0 and res["incomplete"] is None
    sent = [r for r in res["records"] if not r["skipped"]]
    skipped = [r for r in res["records"] if r["skipped"]]
    assert 2 <= len(sent) <= 3 and len(sent) + len(skipped) == 5
    assert all("due after the run's duration (1.5s)" in r["skipped"] for r in skipped)
    assert max(r["t_start_s"] for r in sent) < 1.5


def test_a_turn_waits_for_its_predecessor_and_records_the_lag(tmp_path: Path) -> None:
    text = """
workload lag {
  session u repeat 2 turns every 50ms { repeat 3 label turn { user "x"; reply 4 } }
}
"""
    # each answer takes 300 ms: the instants (every 50 ms) outrun it
    with FaultServer() as server:
        server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "100"}
        code, res = wl_run_text(tmp_path, text, "--base-url", server.base_url)
    assert code == 0
    by_id = {r["id"]: r for r in res["records"]}
    for copy in ("u#0", "u#1"):
        for k in (1, 2):
            this, before = by_id[f"{copy}/turn/{k}"], by_id[f"{copy}/turn/{k - 1}"]
            assert this["t_start_s"] >= before["t_start_s"] + before["e2e_s"] - 1e-6
            assert this["schedule_lag_s"] > 0.15  # planned 100 ms after, sent 300 ms after
    assert res["performance"]["schedule_lag"]["max"] > 0.3


# ---------------------------------------------------------------- the bundled workloads

QUICK = {
    "cache-pressure": ["--kv-size", "16384", "--context-tokens", "2048"],
    "needle-test": ["--lengths", "2000,4000"],
    "agent-sim": ["--sessions", "1", "--main-tokens", "4k", "--step-tokens", "1k",
                  "--sub-tokens", "1k", "--finalize-tokens", "500"],
    "abort-sim": ["--context-tokens", "4k", "--runs", "1"],
    "perf-sim": ["--step-tokens", "4k", "--steps", "2", "--runs", "1"],
    "shared-prompt": ["--sessions", "2", "--system-tokens", "1k", "--turns", "1"],
    "tenant-flood": ["--victim-tokens", "4k", "--tenants", "4", "--tenant-tokens", "1k",
                     "--think", "100ms"],
    "idle-resume": ["--sessions", "1", "--fill-tokens", "2k", "--traffic-tokens", "1k",
                    "--idle", "1s", "--step-tokens", "1k"],
    "coding-agent": ["--sessions", "1", "--tasks", "1", "--subagents", "1", "--drafts", "1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICK))
def test_the_bundled_workloads_report_the_new_metrics(tmp_path: Path, name: str) -> None:
    code, res = wl_run(tmp_path, name, "--sim", "--salt", "m", *QUICK[name])
    assert code in (0, 1), (name, res.get("incomplete"))
    p = res["performance"]
    assert p["requests"] > 0 and p["ttft"]["p50"] > 0 and p["e2e"]["p99"] > 0
    assert p["request_rate"] > 0 and p["concurrency"]["max"] >= 1
    answered = [r for r in res["records"] if not r["skipped"] and not r["error"]]
    longer = [r for r in answered if r["streamed_tokens"] >= 2]  # probes and needles give one
    assert all(len(r["itl_s"]) == r["streamed_tokens"] - 1 for r in longer)
    assert (p["itl"] is not None) == bool(longer) and (p["tpot"] is not None) == bool(longer)


# ---------------------------------------------------------------- bad input, exit 2


@pytest.mark.parametrize("text, flags, said", [
    ("slo { ttft = 2 }", [], "error[WL301]: the SLO `ttft` must be a duration"),
    ("slo { ttft = 95% }", [], "error[WL301]: the SLO `ttft` must be a duration"),
    ("duration = -5s", [], "error[WL305]: `duration` must be above 0s"),
    ("params { d: float = 1 }\n duration = 1s * $d", ["--d", "-5"],
     "error[WL401]: `duration` must be above 0s"),
    ("params { rate: float = 1 in 0.01.. }", ["--rate", "0"], "error[WL401]"),
])
def test_bad_load_input_is_refused_before_anything_is_sent(tmp_path: Path, capsys, text,
                                                           flags, said) -> None:
    body = text + '\n session s repeat 2 turns every 1s { user "x"; reply 2 }'
    wl = tmp_path / "bad.wl"
    wl.write_text("workload bad {\n" + body + "\n}\n")
    with FaultServer() as server:
        code = main(["run", str(wl), "--base-url", server.base_url, "--no-viz", *flags])
        assert server.chat_requests() == []
    assert code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("search, said", [
    ("rate=0..10", "LOW must be above 0 and under HIGH (a rate of 0 sends nothing)"),
    ("rate=8..4", "LOW must be above 0 and under HIGH"),
    ("rate", "write NAME=LOW..HIGH"),
    ("speed=1..4", "not a number param of this workload (its number params: rate)"),
])
def test_a_search_that_cannot_be_run_is_refused(tmp_path: Path, capsys, search, said) -> None:
    wl = tmp_path / "s.wl"
    wl.write_text('workload s {\n params { rate: float = 1 in 0.01.. }\n slo { ttft = 1s }\n'
                  ' session q repeat 2 turns every 1s / $rate { user "x"; reply 2 }\n}\n')
    with FaultServer() as server:
        code = main(["run", str(wl), "--base-url", server.base_url, "--no-viz",
                     "--search", search])
        assert server.requests == []  # not even discovery
    assert code == 2 and said in capsys.readouterr().err


def test_a_search_needs_slos(tmp_path: Path, capsys) -> None:
    wl = tmp_path / "s.wl"
    wl.write_text('workload s {\n params { rate: float = 1 in 0.01.. }\n'
                  ' session q repeat 2 turns every 1s / $rate { user "x"; reply 2 }\n}\n')
    assert main(["run", str(wl), "--sim", "--search", "rate=1..4"]) == 2
    assert "declares no SLOs" in capsys.readouterr().err
