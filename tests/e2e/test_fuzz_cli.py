"""Fuzzing the command line: whatever the flags and values, `wl check` / `wl plan` / `wl report` /
`wl compare` return an exit code (0 or 2; 1 only for compare), never raise. In process
(`workloadlang.cli.main.main`), so it runs a few hundred argument lists in seconds; the subprocess suites
(test_hostile_source, test_run_outputs) cover the real process.
"""

from __future__ import annotations

import contextlib
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadlang.cli.main import main as wl_main

WORKLOADS = ["agent-sim", "cache-pressure", "needle-test", "abort-sim", "perf-sim", "nope",
             "/dev/null", "/", ""]
FLAGS = ["--salt", "-p", "--param", "--max-context", "--json", "--full", "--sessions",
         "--kv-size", "--lengths", "--main-tokens", "--settle", "--min-reuse", "--thinking",
         "--format", "--step-tokens", "--max-tokens", "--", "-x", "--sessions="]
VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "2.5", "1e400", "9" * 400, "nan", "inf", "-inf", "8k",
                     "1.5M", "500ms", "95%", "true", "", " ", ",", ",,", "1,2,x", "a=b", "=",
                     "sessions=3", "kv_size=-2k", "\x00", "\udcff", "é" * 50, "x" * 5000,
                     "json", "text"]),
    st.text(max_size=12),
)


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(["check", "plan", "plan", "report", "compare"]))
    argv = [command, draw(st.sampled_from(WORKLOADS))]
    for _ in range(draw(st.integers(0, 5))):
        argv.append(draw(st.sampled_from(FLAGS)))
        if draw(st.booleans()):
            argv.append(draw(VALUES))
    return argv


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs())
def test_any_argument_list_ends_in_an_exit_code(argv: list[str]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = wl_main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
    assert code in (0, 1, 2), (argv, code, err.getvalue()[-2000:])
    assert "Traceback" not in err.getvalue()
