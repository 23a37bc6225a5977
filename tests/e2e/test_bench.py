"""bench/: the shared harness, what bench.scale reads from a run's records, and a smoke run of
every bench script at a small size (each must finish and write figures that make sense; the
figures themselves are docs/performance.md's, not a test's)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import harness
from bench.scale import describe_cohorts, end_cohorts, start_span_ms

# These smoke runs hold their figures to each other, not to a time, and run beside the rest of
# the suite. Those that read a verdict or a rate from time are in test_bench_timed.py, `alone`.

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_harness_table_aligns_columns_and_shows_missing_values() -> None:
    rows = [{"case": "a", "n": 5, "ms": 0.1234}, {"case": "longer", "n": 12, "ms": None}]
    text = harness.table(rows, [("case", "case", ""), ("n", "n", "d"), ("ms", "p50 ms", ".2f")])
    assert text.splitlines() == ["case     n  p50 ms",
                                 "a        5    0.12",
                                 "longer  12       -"]


def test_the_harness_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert harness.pct(values, 0.5) == 51.0 and harness.pct(values, 0.99) == 99.0
    assert harness.pct(values, 1.0) == 100.0 and harness.pct([], 0.5) == 0.0


def test_the_harness_simulator_serves_and_stops(tmp_path: Path) -> None:
    import httpx

    with harness.simulator("--slots", "2") as sim:
        assert httpx.get(sim.root_url + "/health", timeout=5).status_code == 200
        assert httpx.get(sim.base_url + "/models", timeout=5).json()["data"]
        assert sim.cpu_seconds() > 0
    assert sim.proc.returncode is not None  # stopped at the block's end
    with pytest.raises(RuntimeError, match="did not start"):
        with harness.simulator("--no-such-flag"):
            pass


def figures(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["python"]
    return doc["rows"]


def test_sim_overhead_runs_small(tmp_path: Path) -> None:
    from bench import sim_overhead

    out = tmp_path / "sim.json"
    assert sim_overhead.main(["--streams", "2", "--requests", "2", "--prompt-words", "50",
                              "--max-tokens", "4", "--sessions", "1", "--turns", "2",
                              "--step", "40", "--json", str(out)]) == 0
    rows = figures(out)
    assert [r["requests"] for r in rows] == [10, 4, 2]
    assert all(r["server_cpu_ms_per_request"] >= 0 for r in rows)  # counted in clock ticks
    assert all(0 <= r["ttft_ms_p50"] <= r["ttft_ms_p99"] <= r["ttft_ms_max"] for r in rows)
    assert rows[2]["prompt_tokens"] > 2 * 40  # the second turn re-sent the first


def test_client_overhead_runs_small(tmp_path: Path) -> None:
    """1 and 2 streams in both modes: the overhead is what the client measured minus what the
    simulator did, which a loopback client cannot make negative beyond the stamps' rounding."""
    from bench import client_overhead

    out = tmp_path / "overhead.json"
    assert client_overhead.main(["--streams", "1,2", "--rounds", "2", "--max-tokens", "4",
                                 "--decode-us", "0", "--json", str(out)]) == 0
    rows = figures(out)
    assert [(r["case"].strip(), r["n"]) for r in rows] == [
        ("executor x1", 2), ("send x1", 2), ("executor x2", 4), ("after 1st turn x2", 2),
        ("send x2", 4)]
    for r in rows:
        assert -0.5 < r["overhead_p50_ms"] <= r["overhead_max_ms"], r
        assert r["over_1ms_covered"] <= r["over_1ms"] <= r["n"]
    assert "client_delay_max_ms" in rows[0]["health"] and rows[0]["client_cpu_ms_per_request"] > 0


def test_report_scale_runs_small(tmp_path: Path) -> None:
    from bench import report_scale

    out = tmp_path / "report.json"
    assert report_scale.main(["--requests", "300", "--repeat", "1", "--kinds", "abort",
                              "--json", str(out)]) == 0
    rows = figures(out)
    assert [r["kind"] for r in rows] == ["abort"]
    assert all(r["requests"] >= 200 and 0 < r["html_mb"] < r["json_mb"] * 10 for r in rows)
    assert all(r["render_s"] > 0 and r["wall_s"] >= r["render_s"] for r in rows)


def test_realise_speed_runs_small(tmp_path: Path) -> None:
    from bench import realise_speed

    out = tmp_path / "realise.json"
    assert realise_speed.main(["--repeat", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["requests"] == 126 and doc["prompt_tokens"] > 7_000_000
    assert [r["what"].strip()[:7] for r in doc["rows"]] == ["realise", "... and", "synth.f",
                                                            "make_bo"]
    assert all(r["best_s"] > 0 for r in doc["rows"])


def test_plan_speed_runs_small(capsys) -> None:
    """Its profile of one in-process `wl plan`, and its timing of one command (the whole table
    starts some twenty interpreters: too slow for a smoke test)."""
    from bench import plan_speed

    assert plan_speed.main(["--profile", "agent-sim"]) == 0
    out = capsys.readouterr().out
    assert "cumulative" in out and "make_plan" in out
    m = plan_speed.measure([sys.executable, "-c", "print('a', 'b', sep=chr(10))"], 1)
    assert 0 < m["median"] <= m["max"] and m["cpu"] >= 0


def test_parse_speed_runs_small(tmp_path: Path) -> None:
    """Every bundled workload, the large one (agent-sim's session written out 3 times) and the
    same with a misspelt keyword, which ends in its diagnostic."""
    from bench import parse_speed
    from workloadlang.resources import bundled_workloads

    out = tmp_path / "parse.json"
    assert parse_speed.main(["--repeat", "1", "--copies", "3", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["workload"] for r in rows[:-2]] == [name for name, _ in bundled_workloads()]
    agent = next(r for r in rows if r["workload"] == "agent-sim")
    assert rows[-2]["kb"] > agent["kb"] and rows[-1]["kb"] > rows[-2]["kb"]
    assert all(0 < r["best_ms"] <= r["median_ms"] for r in rows)
    diags = parse_speed.parse_or_diagnose(parse_speed.misspelt(parse_speed.large_workload(3)),
                                          "x.wl")()
    assert [d.hint for d in diags] == ["did you mean `session`?"]


def test_install_size_runs_small(tmp_path: Path, monkeypatch) -> None:
    """On this test environment (no install): its site-packages, its distributions, and one
    command timed (the whole table starts two simulator runs)."""
    from bench import install_size

    monkeypatch.setattr(install_size, "commands", lambda wl: [("wl --help", [wl, "--help"])])
    out = tmp_path / "install.json"
    assert install_size.main(["--venv", sys.prefix, "--repeat", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    sizes = doc["distributions"]
    assert sizes["workloadlang"] > 0 and sizes["pydantic"] > 1e6
    assert doc["site_packages_bytes"] > sizes["pydantic"] + sizes["lark"]
    (row,) = figures(out)
    assert row["command"] == "wl --help" and 0 < row["median_s"] <= row["max_s"]
    assert row["cpu_s"] > 0


def test_plan_speed_large_runs_small(tmp_path: Path) -> None:
    """The large plans, with the committed trace slice standing in for the whole trace."""
    from bench import plan_speed

    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "conversation_trace.jsonl").write_text(
        "".join((ROOT / "tests/data/mooncake/conversation_1000.jsonl").read_text()
                .splitlines(keepends=True)[:200]))
    out = tmp_path / "large.json"
    assert plan_speed.main(["--large", "--repeat", "1", "--traces", str(traces),
                            "--json", str(out)]) == 0
    rows = figures(out)
    assert [r["requests"] for r in rows][:2] == ["200", "200"]
    assert int(rows[2]["requests"].replace(",", "")) > 4000  # agent-sim's 4,000 turns
    # each plan's own peak (not this test process's, which a forked child would count)
    assert all(r["median_s"] > 0 and 30 < r["peak_rss_mb"] < 300 for r in rows), rows


def test_plan_speed_limits_writes_what_it_times(tmp_path: Path, capsys) -> None:
    """The workloads at the limits exit as the bench expects (the quick ones planned here, in
    this process: the 50,000-branch fork and the 60,000 requests of a sweep take seconds)."""
    from bench import plan_speed
    from workloadlang.cli.main import main as wl_main

    cases = plan_speed.at_limits(str(tmp_path))
    assert len(cases) == 6 and all(code in (0, 2) for _, _, code, _, _ in cases)
    for label, argv, code, _, _ in cases:
        if "50,000" in label or "together" in label:
            continue
        assert wl_main(["plan", *argv, "--salt", "b"]) == code, label
        err = capsys.readouterr().err
        assert "Traceback" not in err and (code == 0 or "error[WL" in err), err


def test_trace_cache_runs_small(tmp_path: Path) -> None:
    from bench import trace_cache

    out = tmp_path / "cache.json"
    assert trace_cache.main(["--traces", str(ROOT / "tests/data/mooncake/conversation_1000.jsonl"),
                             "--sizes", "1M,2M", "--json", str(out)]) == 0
    (row,) = figures(out)
    assert row["requests"] == 1000 and row["paper"] == 40
    assert row["lru"]["1000000"] <= row["lru"]["2000000"] <= row["unlimited"]
    assert row["unlimited"] == pytest.approx(row["from_ids"], abs=0.001)


def test_itl_truth_runs_small(tmp_path: Path) -> None:
    """2 streams of 8 tokens at 5 ms: the client's gaps and the simulator's writes, and the raw
    loopback floor, one per gap."""
    from bench import itl_truth

    out = tmp_path / "itl.json"
    assert itl_truth.main(["--streams", "2", "--rounds", "1", "--tokens", "8",
                           "--decode-us", "5000", "--json", str(out)]) == 0
    runner, floor = figures(out)
    assert (runner["streams"], runner["gaps"]) == (2, 14) and floor["gaps"] == 14
    for row in (runner, floor):  # the figures held to each other, not to a time
        assert 0 < row["server_p50_ms"] <= row["server_p99_ms"]
        assert 0 <= row["error_p50_ms"] <= row["error_p90_ms"] <= row["error_p99_ms"]
        assert row["p50_apart_ms"] == pytest.approx(
            abs(row["client_p50_ms"] - row["server_p50_ms"]))


def test_fuzz_runs_small() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.fuzz", "8"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "total: 8 examples" in out.stdout


def test_ttft_ranges_runs_small(monkeypatch, capsys) -> None:
    from bench import ttft_ranges

    monkeypatch.setattr(sys, "argv", ["ttft_ranges", "--runs", "1", "--main-tokens", "8k",
                                      "--no-llama"])
    ttft_ranges.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| simulator")]
    assert len(rows) == 2, out
    for row in rows:  # decisive TTFTs were measured (a run that failed would show 0/0)
        late, decisive = map(int, re.search(r"\| (\d+)/(\d+) \(", row).groups())
        assert 0 <= late <= decisive and decisive > 0, row


def test_scale_out_runs_small(tmp_path: Path) -> None:
    """One process and one Ray worker (when Ray is installed) on the small case: every request
    answered, the figures consistent with each other."""
    try:
        import ray  # noqa: F401
        workers = "1"
    except ImportError:
        workers = ""
    out = tmp_path / "scale_out.json"
    proc = subprocess.run([sys.executable, "-m", "bench.scale_out", "--cases", "small",
                           "--workers", workers, "--sessions", "4", "--turns", "3",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = figures(out)
    assert [r["mode"] for r in rows] == ["1 process"] + (["1 workers"] if workers else [])
    for r in rows:
        assert r["exit"] == 0 and r["requests"] == 16
        assert r["rps"] > 0 and r["mbps"] == pytest.approx(r["rps"] * r["body_kb"] / 1000)
        assert r["client_cpu_ms"] > 0 and r["ceiling_rps"] == pytest.approx(
            1000 / r["client_cpu_ms"])
        assert (r["rss_mb"] > 10) if r["mode"] == "1 process" else r["rss_mb"] is None


def test_same_records_tells_a_changed_value_from_a_field_one_side_added() -> None:
    """bench.same_records: a value that differs is a difference; a time is not; a field that one
    side never writes (a change added it) is listed as a change of the schema, not a difference."""
    from bench.same_records import differences, new_fields

    base = [{"id": "s/0", "cached_tokens": 10, "ttft_s": 0.1},
            {"id": "s/1", "cached_tokens": 20, "ttft_s": 0.2}]
    other = [{"id": "s/0", "cached_tokens": 10, "ttft_s": 0.3, "planned_expected_max": 5},
             {"id": "s/1", "cached_tokens": 20, "ttft_s": 0.2}]
    assert differences(base, other) == []
    assert new_fields(base, other) == {"planned_expected_max"}
    other[1] = {**other[1], "cached_tokens": 19}
    assert differences(base, other) == ["s/1.cached_tokens: 20 != 19"]
    # a field both sides write, missing from one record, is a difference of that record
    base[0]["planned_expected_max"] = 5
    base[1]["planned_expected_max"] = 7
    assert differences(base, other) == ["s/1.cached_tokens: 20 != 19",
                                        "s/1.planned_expected_max: 7 != None"]


def test_same_records_compares_the_results_files_but_their_times() -> None:
    """bench.same_records on the results files: the version, the start, the client's health,
    the engine's port and the timings are not compared; a count, a gate, a token figure and a
    report share are."""
    from bench.same_records import results_differences

    def res(**kw: Any) -> dict[str, Any]:
        base: dict[str, Any] = {
            "schema": "workloadlang.results/1", "started_at": "t0", "elapsed_s": 1.0,
            "engine": {"base_url": "http://127.0.0.1:1/v1", "model": "m"},
            "calibration": {"sizing": "vocabulary", "threshold_s": 0.01},
            "client": {"cpu_s": 0.1}, "records": [], "gates": [{"name": "g", "status": "pass"}],
            "report": {"kept": 16, "pct": 0.98, "speed": 812.5},
            "report_format": {"kept": "number", "pct": "percent", "speed": "number"},
            "performance": {"requests": 4, "ttft": {"p50": 0.1}}}
        return {**base, **kw}

    a = res()
    b = res(schema="workloadlang.results/2", started_at="t1", elapsed_s=2.0,
            engine={"base_url": "http://127.0.0.1:2/v1", "model": "m"},
            calibration={"sizing": "vocabulary", "threshold_s": 0.02}, client={"cpu_s": 0.3},
            report={"kept": 16, "pct": 0.98, "speed": 790.0},
            performance={"requests": 4, "ttft": {"p50": 0.2}})
    assert results_differences(a, b) == []
    c = res(report={"kept": 15, "pct": 0.97, "speed": 812.5},
            gates=[{"name": "g", "status": "fail"}], engine={"model": "n"})
    assert results_differences(a, c) == [
        "results.engine.model: 'm' != 'n'",
        "results.gates: [{'name': 'g', 'status': 'pass'}] != [{'name': 'g', 'status': 'fail'}]",
        "results.report.kept: 16 != 15", "results.report.pct: 0.98 != 0.97"]
    # a figure written as null on one side and left out on the other is a difference
    d = res(metrics={"unavailable": None})
    assert results_differences(res(metrics={}), d) == [
        "results.metrics.unavailable: <absent> != None"]


def test_client_cpu_runs_small(tmp_path: Path) -> None:
    """Two sessions of two turns, this checkout against itself: both sides answered every
    request, and this one reports the few tokenizer calls its calibration made."""
    from bench import client_cpu

    out = tmp_path / "cpu.json"
    assert client_cpu.main(["--against", str(ROOT), "--repeat", "1", "--sessions", "2",
                            "--turns", "2", "--turn-tokens", "20", "--json", str(out)]) == 0
    rows = figures(out)
    assert [r["answered"] for r in rows] == [4, 4]
    assert all(r["cpu_s"] > 0 and r["rss_mb"] > 0 for r in rows)
    assert all(0 < r["tokenizer_calls"] <= 5 for r in rows)


def test_trace_start_runs_small(tmp_path: Path) -> None:
    """Ten records of the committed slice: sized with the calibration's calls only; the first
    send of the slice's replay is measured, a request answered within the budget."""
    from bench import trace_start

    out = tmp_path / "start.json"
    assert trace_start.main(["--trace", str(ROOT / "tests/data/mooncake/conversation_1000.jsonl"),
                             "--records", "10", "--first-send", "--budget", "3",
                             "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    assert row["records"] == 10 and row["tokenizer_calls"] == row["calibration_calls"] <= 5
    assert row["bytes"] > 10 * 512 * 4  # ten prompts of whole blocks, encoded
    (first,) = doc["first_send"]
    assert first["first_send_s"] is not None and first["first_send_s"] > 0
    assert first["answered"] >= 1 and first["peak_rss_mb"] > 0


def test_suite_time_reads_a_saved_run(tmp_path: Path, capsys) -> None:
    """A saved run's durations: each test's phases summed, per file, `alone`, `paired` and shared
    apart; the bound is the `alone` time plus half the others'."""
    from bench import suite_time

    saved = tmp_path / "out.txt"
    saved.write_text("....\n============ slowest durations ============\n"
                     "3.00s call     tests/a.py::test_x[1]\n"
                     "1.00s setup    tests/a.py::test_x[1]\n"
                     "2.00s call     tests/a.py::test_y\n"
                     "4.00s call     tests/b.py::test_z\n"
                     "2.00s call     tests/b.py::test_p\n"
                     "1 failed, 3 passed in 9.50s (0:00:09)\n")
    alone = tmp_path / "alone.txt"
    alone.write_text("tests/a.py::test_x[1]\n")
    paired = tmp_path / "paired.txt"
    paired.write_text("tests/b.py::test_p\n")
    out = tmp_path / "suite.json"
    assert suite_time.main(["--from", str(saved), "--alone-list", str(alone), "--paired-list",
                            str(paired), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["rows"] == [{"file": "tests/a.py", "alone_s": 4.0, "paired_s": 0.0, "shared_s": 2.0},
                           {"file": "tests/b.py", "alone_s": 0.0, "paired_s": 2.0, "shared_s": 4.0}]
    assert doc["totals"] == {"wall_s": 9.5, "alone_s": 4.0, "paired_s": 2.0, "shared_s": 6.0,
                             "bound_s": 8.0}
    assert "1 failed, 3 passed: wall 9.5 s" in capsys.readouterr().out
