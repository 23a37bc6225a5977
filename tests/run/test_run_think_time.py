"""run: `wait reading RATE` waits for the time to read the session's previous answer, from the
tokens the engine really generated (not the planned `max_tokens`).

A loopback fault server answers s#0 with 20 tokens and s#1 with 2; at 50 tokens/s the next
request of s#0 waits at least 0.4 s after the answer ended, s#1's about 0.04 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faultserver import FaultServer
from runhelp import wl_run_text as wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

READING = """workload reading {
  session s repeat 2 {
    user "Tell me."
    reply 64
    wait reading 50
    user "Thanks."
    reply 4
  }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def test_the_reading_time_follows_the_answer_length(tmp_path: Path, server: FaultServer):
    server.fault_for = lambda rid, body: {"x-tokens": "20" if rid.startswith("s#0") else "2"}
    code, res = wl_run(tmp_path, READING, "--base-url", server.base_url)
    assert code == 0, res.get("gates")
    gap = {}
    for k in (0, 1):
        first, second = server.spans[f"s#{k}/reply/0"], server.spans[f"s#{k}/reply/0.1"]
        gap[k] = second[0] - first[1]
    assert gap[0] >= 20 / 50 - 0.005
    assert 2 / 50 - 0.005 <= gap[1] < 20 / 50 - 0.005
