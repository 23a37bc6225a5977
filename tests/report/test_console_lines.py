"""The plain lines of `wl run` as a new user reads them: a request in a branch of a parallel
fork names its branch."""

from __future__ import annotations

from workloadlang.console.lines import record_line
from workloadlang.report import sample


def test_a_request_in_a_parallel_branch_names_its_lane():
    lines = [record_line(sample.record(id=f"main#0/step/0.{k}", seq=k, session="main#0",
                                       label="step", index=0, lane=f"0.{k}")) for k in range(3)]
    assert [line.split()[:4] for line in lines] == [
        ["main#0", "step[0]", "lane", f"0.{k}"] for k in range(3)]
    assert len(set(lines)) == 3
    plain = record_line(sample.record(id="main#0/tests/0", seq=3, session="main#0",
                                      label="tests"))
    assert plain.split()[:2] == ["main#0", "tests[0]"] and "lane" not in plain
