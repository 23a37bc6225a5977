"""Scheduling through `wl run` (the CLI's `main`, in-process) against a REAL loopback server that
times every chat request (tests/faultserver.py `spans`, `max_inflight`): the workload's
concurrency limit is really enforced, sessions start together, requests of one session follow
each other, a phase is a barrier across sessions, and connections are kept alive."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultserver import FaultServer
from runhelp import wl_run_text as wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

CONCURRENT = """
workload conc {
  params { c: int = 2 }
  concurrency = $c
  session s repeat 6 { repeat 2 label step { user "hello"; reply 4 } }
}
"""

PHASED = """
workload phased {
  concurrency = 6
  session s repeat 3 {
    phase one { turn a { user "hi"; reply 4 } }
    phase two { turn b { user "again"; reply 4 } }
  }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server




@pytest.mark.parametrize("limit", [2, 6])
def test_concurrency_limit_is_enforced(tmp_path: Path, server: FaultServer, limit: int) -> None:
    server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "40"}
    code, res = wl_run(tmp_path, CONCURRENT, "--base-url", server.base_url, "--c", str(limit))
    assert code == 0
    assert len(server.spans) == 12 and all(r["error"] is None for r in res["records"])
    # never more than the limit, and the limit reached: six sessions start together
    assert server.max_inflight == limit
    # within a session the second step starts only after the first one ended
    for k in range(6):
        first, second = server.spans[f"s#{k}/step/0"], server.spans[f"s#{k}/step/1"]
        assert first[1] is not None and second[0] > first[1]
    assert set(res["client"]) >= {"loop_lag_p99_ms", "client_delay_p99_ms", "client_bottleneck",
                                  "ttft_late", "ttft_late_max_ms"}


def test_phases_are_barriers(tmp_path: Path, server: FaultServer) -> None:
    # s#0's phase-one request is slow; everybody's phase two must wait for it
    server.fault_for = lambda rid, body: (
        {"x-fault": "slow", "x-tokens": "6", "x-interval-ms": "60"} if rid.startswith("s#0/one/")
        else {"x-fault": "slow", "x-tokens": "2", "x-interval-ms": "5"})
    code, res = wl_run(tmp_path, PHASED, "--base-url", server.base_url)
    assert code == 0
    one = {rid: span for rid, span in server.spans.items() if "/one/" in rid}
    two = {rid: span for rid, span in server.spans.items() if "/two/" in rid}
    assert len(one) == len(two) == 3
    last_end = max(end for _, end in one.values())
    assert last_end == one["s#0/one/a/0"][1]
    assert min(start for start, _ in two.values()) > last_end
    # phase one itself ran concurrently (the barrier is between phases, not between requests)
    assert max(start for start, _ in one.values()) < min(end for _, end in one.values())


def test_sequential_requests_reuse_one_connection(tmp_path: Path, server: FaultServer) -> None:
    # a finished stream's connection goes back to the pool (its body is read to the end after
    # [DONE]); a new TCP connection per request would cost every TTFT a connect
    code, _ = wl_run(tmp_path, 'workload seq { session s { repeat 6 { user "hi"; reply 4 } } }',
                     "--base-url", server.base_url)
    assert code == 0
    peers = [r["peer"] for r in server.chat_requests()]
    assert len(peers) == 6 and len(set(peers)) == 1, peers
