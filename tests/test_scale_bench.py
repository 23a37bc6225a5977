"""bench/scale.py's reading of a run's records: cohorts of answers that end together, and how
many earlier answers still waited when the worst session gap's answer ended (the run itself is
a bench, not a test)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench"))

from scale import describe_cohorts, end_cohorts, start_span_ms  # noqa: E402


def rec(session: str, start: float, e2e: float | None) -> dict:
    return {"session": session, "t_start_s": start, "e2e_s": e2e}


def test_answers_ending_less_than_2_ms_apart_form_one_cohort() -> None:
    """Sessions a, b, c end at 1.000, 1.001, 1.0027 s (a chain of gaps under 2 ms) and send again
    0.5, 1.0 and 3 ms later; d ends alone at 1.010 s; e's only request has no next one; f's
    answer failed without a duration (no end to go on from)."""
    recs = [rec("a", 0.0, 1.0), rec("a", 1.0005, 0.1),
            rec("b", 0.0, 1.001), rec("b", 1.002, 0.1),
            rec("c", 0.0, 1.0027), rec("c", 1.0057, 0.1),
            rec("d", 0.0, 1.010), rec("d", 1.0101, 0.1),
            rec("e", 0.0, 1.0), rec("f", 0.0, None), rec("f", 1.2, 0.1)]
    cohorts = end_cohorts(recs)
    assert [[round(e, 4) for e, _ in c] for c in cohorts] == [[1.0, 1.001, 1.0027], [1.01]]
    assert [round(g, 3) for _, g in cohorts[0]] == [0.5, 1.0, 3.0]
    text = describe_cohorts(cohorts)
    assert "largest cohort 3 answers" in text
    # when c's answer ended (1.0027 s) a and b had sent already: none was waiting
    assert "worst gap (3.0 ms) followed an end at 1.003 s, when 0 answers" in text


def test_the_worst_gap_counts_the_earlier_answers_still_waiting_when_it_ended() -> None:
    """Four answers end 0.1 ms apart and their sessions send 2, 4, 6 and 8 ms later (turned
    around one by one): when the last one ended, the three before it were still waiting."""
    recs = []
    for i, name in enumerate("abcd"):
        end = 1.0 + i * 0.0001
        recs += [rec(name, 0.0, end), rec(name, 1.0 + 0.002 * (i + 1), 0.1)]
    text = describe_cohorts(end_cohorts(recs))
    assert text.startswith("largest cohort 4 answers")
    assert "when 3 answers that ended before it still waited" in text
    assert describe_cohorts([]) == "no session sent after an answer"


def test_the_start_span_runs_from_the_first_to_the_last_sessions_first_send() -> None:
    recs = [rec("a", 0.0002, 1.0), rec("a", 1.1, 0.1), rec("b", 0.0051, 1.0),
            rec("c", 0.0013, 1.0), {"session": "d", "t_start_s": None, "e2e_s": None}]
    assert round(start_span_ms(recs), 3) == 4.9
    assert start_span_ms([]) is None


def test_cpu_masks_are_written_the_way_the_kernel_reads_them() -> None:
    from simproc import cpu_mask
    assert cpu_mask({1}) == "2"
    assert cpu_mask({0, 1, 3}) == "b"
    assert cpu_mask({31}) == "80000000"
    assert cpu_mask({0, 33}) == "2,00000001"
    assert cpu_mask({64}) == "1,00000000,00000000"


def test_steering_loopback_puts_the_mask_back_even_when_the_run_fails(tmp_path) -> None:
    import pytest
    from simproc import steer_loopback
    path = tmp_path / "rps_cpus"
    path.write_text("0\n")
    with steer_loopback({1}, str(path)) as before:
        assert before == "0" and path.read_text() == "2"
    assert path.read_text() == "0"
    with pytest.raises(RuntimeError), steer_loopback({0, 1}, str(path)):
        assert path.read_text() == "3"
        raise RuntimeError("the run failed")
    assert path.read_text() == "0"
    with pytest.raises(SystemExit, match="--steer-lo: cannot set .*needs root"):
        with steer_loopback({1}, str(tmp_path / "missing" / "rps_cpus")):
            pass


def test_late_sends_are_first_sends_after_the_bound_and_next_sends_after_an_answer() -> None:
    """a's first send is 12 ms after the start (late), b's 2 ms (not); a's next send comes
    15 ms after its answer ended (late), b's 4 ms after (not)."""
    from scale import late_sends
    recs = [rec("a", 0.012, 1.0), rec("a", 1.027, 0.1),
            rec("b", 0.002, 1.0), rec("b", 1.006, 0.1)]
    assert [(round(b, 3), round(e, 3)) for b, e in late_sends(recs)] == \
        [(0.0, 0.012), (1.012, 1.027)]


def test_the_clients_own_share_of_each_late_send_is_read_from_perf_samples(monkeypatch) -> None:
    """Two late sends 0.5 s apart share one read of perf's file, a third 5 s later has its
    own. In the first window (10 ms at 1000 Hz) the client's samples cover 4 ms and a 6 ms
    gap between two busy samples is the host's; in the second the client ran all 12 ms."""
    import scale
    calls = []

    def samples(path, begin, end):
        calls.append((round(begin, 3), round(end, 3)))
        rows = [(0, 7, "wl", 0.99 + k / 1000, 7) for k in range(10)]
        rows += [(0, 7, "wl", 1.000 + k / 1000, 7) for k in range(1, 5)]  # 1.001-1.004
        rows += [(0, 7, "wl", 1.011 + k / 1000, 7) for k in range(0, 600)]  # gap, then busy
        return rows

    monkeypatch.setattr(scale.cpuwindow, "samples", samples)
    shares = scale.own_shares("perf.data", [(1.000, 1.010), (1.5005, 1.5125), (6.5, 6.51)],
                              7, 1000)
    assert calls == [(0.0, 2.513), (5.5, 7.51)]
    first, second = shares[0][2], shares[1][2]
    assert first["client"] == 4.0 and first["unsampled_busy"] == 6.0
    assert second["client"] == 12.0
    line = scale.describe_own(shares)
    assert line.startswith("3 sends more than 10 ms after their session could go on")
    assert "the client ran at most 12.0 ms (OVER 10 ms), in a 12.0 ms window" in line
    assert scale.describe_own(shares[:1]).count("(within 10 ms)") == 1
    assert scale.describe_own([]) == "no send more than 10 ms after its session could go on"


def test_cpu_steady_reports_the_spread_of_equal_work() -> None:
    import cpu_steady  # noqa: E402 (bench/)

    assert cpu_steady.describe([0.05, 0.04, 0.08]) == (
        "min  40.0  median  50.0  max  80.0 ms  max/min 2.00")
    times = cpu_steady.rounds(2)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert len(cpu_steady.work()) == 1024  # the same work every round


def test_slowcalls_records_slow_loop_callbacks_and_the_executors_steps(tmp_path) -> None:
    """bench/slowcalls, loaded through PYTHONPATH as `--slow-calls` loads it: a callback that
    sleeps 30 ms and a fast one; an `Executor._chain` (a stand-in module with that name) that
    takes 20 ms inside a task step. Only the slow ones are written, each named."""
    import json
    import subprocess

    fake = tmp_path / "pkg" / "workloadlang" / "run"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "executor.py").write_text(
        "import time\n"
        "class Executor:\n"
        "    def _chain(self, req, after, answer):\n"
        "        time.sleep(0.02)\n"
        "        return True\n")
    script = (
        "import asyncio, time\n"
        "import workloadlang.run.executor as ex\n"
        "class R:\n"
        "    id = 's1#2'\n"
        "def slow():\n"
        "    time.sleep(0.03)\n"
        "def fast():\n"
        "    pass\n"
        "async def step():\n"
        "    ex.Executor()._chain(R(), None, None)\n"
        "async def main():\n"
        "    loop = asyncio.get_running_loop()\n"
        "    loop.call_soon(slow)\n"
        "    loop.call_soon(fast)\n"
        "    await asyncio.sleep(0.01)\n"
        "    await asyncio.ensure_future(step())\n"
        "asyncio.run(main())\n")
    out = tmp_path / "slow.jsonl"
    here = os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "slowcalls")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, str(tmp_path / "pkg")]),
               WL_SLOWCALLS=str(out), WL_SLOWCALLS_MS="10")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60,
                   cwd=tmp_path)  # not the repository's `workloadlang`: the stand-in
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    whats = [r["what"] for r in rows]
    assert any(w == "slow" for w in whats), whats
    assert not any(w == "fast" for w in whats), whats
    assert "  _chain s1#2" in whats, whats
    assert "task step" in whats, whats
    assert all(r["ms"] >= 10 for r in rows), rows


def test_the_slow_calls_report_lists_what_overlaps_the_worst_delay(tmp_path, capsys) -> None:
    """The run's origin is 1000 s (unix); the worst delay is 10 ms ending at 2.000 s. Of the
    recorded calls, one ends inside the window, one starts inside it, one is before it and one
    came before the run: the report counts the run's loop callbacks and lists the two."""
    import json

    from scale import print_slow_calls

    sent = [{"t_send_unix": 1000.0 + t, "t_start_s": t, "e2e_s": 1.0} for t in (0.0, 2.5)]
    rows = [{"at": 1001.9885, "ms": 3.0, "what": "_Connection._on_readable"},  # ends at +1.5
            {"at": 1001.9985, "ms": 4.0, "what": "  _chain s1#2"},  # starts at +8.5
            {"at": 1001.5, "ms": 6.0, "what": "Executor._deferred"},  # before the window
            {"at": 999.0, "ms": 50.0, "what": "task main_async"}]  # before the run
    path = tmp_path / "slowcalls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print_slow_calls(str(path), sent, {"client_delay_max_ms": 10.0,
                                       "client_delay_max_at_s": 2.0}, 2.0)
    out = capsys.readouterr().out
    assert "2 loop callbacks over 2 ms during the run, the longest 6.0 ms " \
           "(Executor._deferred) at 1.500 s" in out
    assert ("10.0 ms window at 2.000 s: +-1.5 _Connection._on_readable 3.0 ms; "
            "+8.5 _chain s1#2 4.0 ms") in out
