"""The HTML report on hand-made results: chart selection from the records, the numbers each
chart draws, escaping, self-containment, overlays, the gate table and the command."""

from __future__ import annotations

import re
import types
from collections import Counter
from pathlib import Path

import pytest

from workloadlang.report import ReportRequest, data, report_command, sample, tables, write_report
from workloadlang.report.render import ReportError, charts, render_html, run_labels
from workloadlang.resultsmodels import CacheTheory, EngineSummary, MetricsSummary

EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>&amp;"


def chart_keys(html: str) -> list[str]:
    return re.findall(r'data-chart="(\w+)"', html)


# ---------------------------------------------------------------- chart selection


@pytest.mark.parametrize("make, expected", [
    (sample.retention, ["retention"]),
    (sample.agent, ["sessions", "speed"]),
    (sample.perf, ["speed"]),
    (sample.abort, ["abort"]),
    (sample.needles, ["needles"]),
])
def test_charts_follow_the_records(make, expected):
    # every run with an answered request also has its latency distribution
    assert chart_keys(render_html([make()])) == expected + ["latency"]


def test_chart_choice_ignores_the_workload_name():
    res = sample.perf().model_copy(update={"workload": "cache_pressure"})
    assert chart_keys(render_html([res])) == ["speed", "latency"]


def test_no_chart_of_a_shape_for_records_without_one():
    res = sample.perf(runs=1, steps=1)
    assert chart_keys(render_html([res])) == ["latency"]


def test_nothing_to_chart_without_an_answer():
    res = sample.perf(runs=1, steps=1)
    res = res.model_copy(update={"records": [r.model_copy(update={"ttft_s": None})
                                             for r in res.records]})
    html = render_html([res])
    assert chart_keys(html) == []
    assert "nothing to chart" in html


# ---------------------------------------------------------------- retention


def test_retention_marks_first_miss_retained_capacity_and_kv_size():
    res = sample.retention(contexts=12, ctx_tokens=8192, kv_size=65536, retained=7)
    d = data.retention(res.records, res.calibration, res.params)
    prompt = 8192 + sample.SYSTEM
    assert d.order == list(range(1, 9))  # 7 hits, the miss, 4 skipped left out
    assert d.hit == [True] * 7 + [False]
    assert d.first_miss == 8
    assert d.retained_tokens == 7 * prompt
    assert d.kv_reached_at == 8  # 8 * 8204 >= 65536 > 7 * 8204
    assert d.threshold_s == 0.25 and d.kv_size == 65536
    assert d.cached_frac[-1] == 0 and d.cached_frac[0] == pytest.approx(1, abs=1e-3)


def test_retention_without_a_miss_or_kv_size():
    res = sample.retention(contexts=4, retained=10)
    res.params.pop("kv_size")
    d = data.retention(res.records, res.calibration, res.params)
    assert d.first_miss is None and d.kv_reached_at is None and d.kv_size is None
    assert d.retained_tokens == 4 * (8192 + sample.SYSTEM)


def test_retention_chart_draws_threshold_and_markers():
    html = render_html([sample.retention()])
    svg = html[html.index('data-chart="retention"'):]
    assert "calibrated threshold 0.25 s" in svg
    assert "first miss #8" in svg
    assert "stated KV size 65.5k re-sent" in svg
    assert "88% of the stated KV size" in svg  # 7 * 8204 / 65536


# ---------------------------------------------------------------- sessions


def test_lanes_sort_sessions_naturally_and_carry_verdicts():
    res = sample.agent(sessions=11, steps=2, subs=1, evicted=[10])
    d = data.lanes(res.records, res.verdicts)
    assert d.sessions[:3] == ["main#1", "main#2", "main#3"] and d.sessions[-1] == "main#11"
    assert d.verdicts[9] == "evicted" and d.verdicts.count("ok") == 10
    assert d.labels == ["main", "sub", "finalize"]
    assert len(d.t) == len(res.records)


def test_cold_requests_are_not_coloured_by_reuse():
    res = sample.agent(sessions=2, steps=2, subs=1)
    d = data.lanes(res.records, res.verdicts)
    subs = [reuse for lab, reuse in zip(d.label, d.reuse) if lab == "sub"]
    assert subs and all(r is None for r in subs)


def test_one_session_has_no_lanes():
    assert data.lanes(sample.perf().records, {}) is None


def test_verdicts_appear_on_the_sessions_chart():
    html = render_html([sample.agent(sessions=3, evicted=[2])])
    svg = html[html.index('data-chart="sessions"'):html.index('data-chart="speed"')]
    assert svg.count(">ok<") == 2 and svg.count(">evicted<") == 1


def test_many_sessions_summarise_verdicts():
    html = render_html([sample.agent(sessions=60, steps=2, subs=1, evicted=[5, 6])])
    assert "verdicts (right edge) — ok: 58, evicted: 2" in html


# ---------------------------------------------------------------- speed


def test_speed_has_one_line_per_run_and_the_mean():
    res = sample.perf(runs=3, steps=5)
    d = data.speed(res.records)
    assert d.label == "level" and len(d.runs) == 3
    assert [p.level for p in d.runs[1]] == [0, 1, 2, 3, 4]
    mean = d.mean()
    assert len(mean) == 5
    level2 = [run[2].pp for run in d.runs]
    assert mean[2].pp == pytest.approx(sum(level2) / 3)


def test_cold_siblings_sharing_a_system_prompt_are_not_a_grown_conversation():
    recs = [sample.record(id=f"s/ctx/{i}", seq=i, label="ctx", index=i, prompt_tokens=8000,
                          planned_prompt_tokens=8000, planned_expected_cached=12 if i else 0,
                          prefix_source=f"s/ctx/{i - 1}" if i else None, pp_tps=1000.0)
            for i in range(5)]
    assert data.grown_label(recs) is None and data.speed(recs) is None


def test_agent_sessions_grow_their_main_context():
    d = data.speed(sample.agent(sessions=2, steps=4).records)
    assert d.label == "main" and len(d.runs) == 2 and len(d.runs[0]) == 4


# ---------------------------------------------------------------- abort


def test_abort_pairs_each_prime_with_its_reprompt():
    res = sample.abort(runs=3, kept=[True, False])
    d = data.abort(res.records, 0.95)
    assert [r.run for r in d.runs] == [1, 2, 3]
    assert [r.reprompt_id for r in d.runs] == [f"main#1/reprompt/{i}" for i in range(3)]
    kept, lost = d.runs[0], d.runs[1]
    assert kept.cached - kept.prime_prompt == 500 == kept.streamed
    assert lost.cached - lost.prime_prompt == -16
    assert d.threshold == 0.95


def test_abort_estimates_the_prompt_when_the_engine_sent_no_usage():
    res = sample.abort(runs=1)
    prime = res.records[0].model_copy(update={"prompt_tokens": None})
    d = data.abort([prime, res.records[1]], None)
    run = d.runs[0]
    assert run.estimated
    growth = res.records[1].planned_prompt_tokens - prime.planned_prompt_tokens
    assert run.prime_prompt == res.records[1].prompt_tokens - growth


def test_abort_threshold_comes_from_the_reuse_gate_line():
    html = render_html([sample.abort()])
    assert "gate: reuse ≥ 95%" in html
    assert "gate: reuse ≥ 25000%" not in html


# ---------------------------------------------------------------- needles


def test_needles_from_the_gate_line_and_found_per_length():
    res = sample.needles(lengths=[1000, 5000, 9000], window=5000)
    d = data.needles(res.records, {"needle"}, 0.8)
    assert [(r.length, r.found) for r in d.rows] == [(1040, True), (5040, True), (9040, False)]
    assert d.depth == 0.8


def test_a_failed_check_marks_its_label_without_the_source():
    res = sample.needles(lengths=[1000, 9000], window=5000)
    assert data.needles(res.records, set()) is not None


def test_unchecked_records_are_no_needles():
    res = sample.needles(lengths=[1000, 2000], window=5000)
    assert data.needles(res.records, set()) is None
    assert data.checked_labels(["found: overall all(ok{needle, last 2}) -> x"]) == {"needle"}


def test_needle_error_is_neither_found_nor_lost():
    res = sample.with_error(sample.needles(lengths=[1000, 2000]), 1, "boom")
    d = data.needles(res.records, {"needle"})
    assert [r.found for r in d.rows] == [True, None]


# ---------------------------------------------------------------- safety and self-containment


def test_model_output_is_text_not_markup():
    res = sample.with_error(sample.needles(reply=EVIL), 2, EVIL)
    html = render_html([res])
    assert "<script" not in html.lower()
    assert "<img" not in html
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert "&amp;amp;" in html  # an entity in the reply is shown, not decoded


def test_a_sweeps_page_forbids_scripts_and_loads_nothing_too():
    """The sweep report lacked the Content-Security-Policy single-run reports carry."""
    from workloadlang.report.sweeppage import render_sweep_html
    from workloadlang.sweepresults import SweepResults

    points = [sample.agent(), sample.agent()]
    sweep = SweepResults(workload=points[0].workload, param="sessions", values=["1", "2"],
                         exit_code=0, points=points)
    html = render_sweep_html([sweep], ["<i>a</i>"])
    assert ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">") in html
    assert html.index("Content-Security-Policy") < html.index("<title>")
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', html)
    assert all(r.startswith(("#", "data:")) for r in refs), refs
    assert "<script" not in html.lower() and "<i>a</i>" not in html


def test_params_and_labels_are_escaped_too():
    res = sample.abort()
    res = res.model_copy(update={"params": {**res.params, "reprompt_mode": EVIL},
                                 "source": "<b>x</b>.wl"})
    html = render_html([res], labels=["<i>before</i>"])
    assert "<script" not in html.lower() and "<b>x</b>" not in html and "<i>before" not in html


def test_page_forbids_scripts_and_loads_nothing():
    html = render_html([sample.agent()])
    assert ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">") in html
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', html)
    assert all(r.startswith(("#", "data:")) for r in refs), refs
    assert re.search(r"url\(#", html), "expected the SVG's internal references (clip paths)"
    assert not re.search(r"url\((?!#)", html)
    assert "@import" not in html


def test_dense_charts_stay_vector():
    html = render_html([sample.agent(sessions=40, steps=50, subs=2)])
    assert "<image" not in html and "data:image" not in html
    assert html.count('class="mk"') < 200  # marks of one colour and shape share a path


def test_ids_are_unique_across_charts():
    html = render_html([sample.agent(), sample.agent(evicted=[])], labels=["a", "b"])
    ids = Counter(re.findall(r'\sid="([^"]+)"', html))
    assert ids and max(ids.values()) == 1, [i for i, n in ids.items() if n > 1][:5]


# ---------------------------------------------------------------- overlays


def test_two_runs_overlay_with_a_legend():
    before, after = sample.perf(slower=1.6), sample.perf()
    html = render_html([before, after], labels=["before", "after"])
    svg = html[html.index('data-chart="speed"'):]
    assert "before: mean of 3 conversations" in svg and "after: mean of 3 conversations" in svg
    assert "Overlaid: before, after." in html


def test_overlay_in_every_chart_kind():
    for make in (sample.retention, sample.agent, sample.abort, sample.needles):
        html = render_html([make(), make()], labels=["one", "two"])
        for key in chart_keys(html):
            part = html[html.index(f'data-chart="{key}"'):]
            part = part[:part.index("</figure>")]
            texts = " | ".join(re.findall(r"<text[^>]*>([^<]*)</text>", part))
            assert "one" in texts and "two" in texts, (make.__name__, key, texts)


def test_different_workloads_refuse():
    with pytest.raises(ReportError, match="different workloads"):
        render_html([sample.perf(), sample.abort()])
    with pytest.raises(ReportError):
        render_html([])


def test_labels_are_made_distinct():
    runs = [sample.perf(), sample.perf()]
    assert run_labels(runs, ["x", "x"]) == ["x", "x (2)"]
    assert len(set(run_labels(runs))) == 2


# ---------------------------------------------------------------- header and gates


def test_header_names_the_run():
    html = render_html([sample.abort()])
    for text in ("abort_sim", "5a1t0001", "sha256:0123456789abcdef", "sim-model",
                 "sim (simulator)", "2025-01-01T12:00:00+00:00", "thinking_tokens"):
        assert text in html


def test_gates_come_before_the_charts_with_line_and_code():
    html = render_html([sample.abort()])
    assert html.index('id="gates"') < html.index('id="charts"') < html.index('id="evidence"')
    assert "reuse: overall reuse{reprompt} &gt;= $min_reuse -&gt; prefix_lost" in html
    assert '<span class="badge fail">fail</span>' in html
    assert '<span class="badge warn">warn</span>' in html


def gate_result(status, severity="fail"):
    return types.SimpleNamespace(status=status, severity=severity)


@pytest.mark.parametrize("status, severity, state", [
    ("pass", "fail", "pass"), ("fail", "fail", "fail"), ("unknown", "fail", "unverified"),
    ("fail", "warn", "warn"), ("unknown", "warn", "warn"), ("pass", "warn", "pass")])
def test_gate_state(status, severity, state):
    assert tables.gate_state(gate_result(status, severity)) == state


def test_per_session_gate_lists_failing_scopes():
    rows = tables.gate_rows([sample.agent(sessions=3, evicted=[2])])
    survival = next(r for r in rows if r["name"] == "survival")
    cell = survival["cells"][0]
    assert cell["state"] == "fail" and cell["summary"] == "1 of 3 scopes did not pass"
    assert cell["scopes"] == ["main#2: no fail"]
    assert survival["code"].startswith("survival: each session all(hit{finalize})")


def test_gate_missing_in_one_run_is_shown_as_such():
    a, b = sample.abort(), sample.abort()
    b = b.model_copy(update={"gates": b.gates[:1]})
    rows = tables.gate_rows([a, b])
    assert rows[1]["cells"][1] is None
    assert "not in this run" in render_html([a, b])


def test_source_line_is_left_out_when_the_file_is_another_workload(tmp_path):
    other = tmp_path / "x.wl"
    other.write_text("workload something_else {}\n" * 50)
    res = sample.abort().model_copy(update={"source": str(other)})
    assert all(r["code"] == "" for r in tables.gate_rows([res]))


# ---------------------------------------------------------------- evidence


def test_the_run_table_has_the_engine_counters_and_rows_say_why_a_ttft_is_in_doubt():
    res = sample.agent(sessions=2, steps=3)
    snaps = [{"at": "start", "queries_tokens": 0, "hits_tokens": 0, "family": "vllm"},
             {"at": "end", "queries_tokens": 5000, "hits_tokens": 4000, "family": "vllm"}]
    res = res.model_copy(update={"metrics": MetricsSummary.model_validate({
        "snapshots": snaps, "engine_queries_tokens": 5000, "engine_hits_tokens": 4000,
        "records_prompt_tokens": 5000, "records_cached_tokens": 4000})})
    assert tables.header(res, "x")["counters"] == (
        "engine counters over the run [vllm]: 4,000 of 5,000 prompt tokens from cache; the "
        "records: 4,000 of 5,000")
    assert "engine counters over the run [vllm]: 4,000 of 5,000" in render_html([res])
    assert tables.header(res.model_copy(update={"metrics": MetricsSummary()}),
                         "x")["counters"] == ""
    shared = res.model_copy(update={"engine": EngineSummary(engine="llamacpp", slots=4,
                                                            prefill_own=False)})
    assert tables.header(shared, "x")["engine"] == \
        "llamacpp · 4 slots, prefill times may hold other requests' work"
    sim = res.model_copy(update={"engine": EngineSummary(engine="workloadlang-sim", sim=True,
                                                         slots=4, prefill_own=True)})
    assert tables.header(sim, "x")["engine"] == \
        "workloadlang-sim (simulator) · 4 slots, prefill times each request's own"
    assert tables.header(res.model_copy(update={"engine": EngineSummary(engine="vllm")}),
                       "x")["engine"] == "vllm"
    r = res.records[1].model_copy(update={"ttft_late_s": 0.003, "ttft_contended_s": 0.2,
                                          "prefill_source": "client_ttft"})
    note = tables.row_note(r)
    assert "TTFT may be up to 3 ms late" in note
    assert "other requests in flight for" in note
    assert "other requests" not in tables.row_note(r.model_copy(update={"prefill_source": "server"}))
    shared = r.model_copy(update={"prefill_source": "server", "prefill_contended_s": 0.5})
    assert "other requests in flight for 500 ms of the engine's own prefill time" in \
        tables.row_note(shared)


def test_evidence_rows_carry_sources_and_flag_disagreements():
    res = sample.agent(sessions=2, steps=3)
    recs = list(res.records)
    k = next(i for i, r in enumerate(recs) if r.label == "finalize" and r.hit)
    recs[k] = recs[k].model_copy(update={"ttft_agrees": False})
    ev = tables.evidence(res.model_copy(update={"records": recs}), "x")
    assert ev["counts"]["disagree"] == 1
    row = ev["disagree"][0]
    assert row[0] == "disagree" and row[1] == recs[k].id
    assert row[8].startswith("engine:") and row[11] == "cached"
    assert "engine claims a hit, TTFT looks cold" in row[14]
    assert ev["common_source"] == "usage.prompt_tokens_details.cached_tokens"
    assert row[6] == ""  # the common source is said once, above the table


def test_evidence_row_shows_skips_errors_and_aborts():
    res = sample.retention()
    skipped = tables.evidence_row(res.records[-1])
    assert skipped[0] == "skip" and "skipped: until miss" in skipped[14]
    aborted = tables.evidence_row(sample.abort().records[0])
    assert "aborted after 500 streamed tokens" in aborted[14]
    err = tables.evidence_row(sample.with_error(sample.perf(), 0, "bad gateway").records[0])
    assert err[0] == "err" and "http: bad gateway" in err[14]


@pytest.mark.parametrize("value, text", [
    (None, "–"), (True, "yes"), (12345, "12,345"), (0.98214, "0.9821"), (65536.0, "65,536"),
    ({"0": 1.5, "1": 2}, "0: 1.5, 1: 2")])
def test_fmt_num(value, text):
    assert tables.fmt_num(value) == text


def test_headline_numbers_follow_their_declared_format():
    res = sample.retention().model_copy(update={
        "report": {"retained_pct": 1.2232, "retained_tokens": 80130.0, "by_level": {"0": 0.5}},
        "report_format": {"retained_pct": "percent", "retained_tokens": "tokens",
                          "by_level": "percent"}})
    head = dict(tables.header(res, "x")["headline"])
    assert head == {"retained_pct": "122.3%", "retained_tokens": "80,130 tokens",
                    "by_level": "0: 50.0%"}


def test_fmt_seconds_and_percent():
    assert tables.fmt_seconds(0.0874) == "87 ms" and tables.fmt_seconds(1.236) == "1.24 s"
    assert tables.fmt_pct(0.9821) == "98.2%" and tables.fmt_pct(None) == "–"


# ---------------------------------------------------------------- the command


def test_report_command_reads_results_files(tmp_path, capsys):
    paths = []
    for name, res in (("before", sample.perf(slower=1.5)), ("after", sample.perf())):
        p = tmp_path / f"{name}.json"
        p.write_text(res.to_json())
        paths.append(str(p))
    out = tmp_path / "r.html"
    assert report_command(ReportRequest(results=tuple(paths), output=str(out))) == 0
    html = out.read_text()
    assert "before: mean of 3 conversations" in html and "<th>after</th>" in html
    assert "report:" in capsys.readouterr().err


def test_report_command_refuses_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert report_command(ReportRequest((str(bad),), str(tmp_path / "r.html"))) == 2
    assert "wl report: error:" in capsys.readouterr().err
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(sample.perf().to_json())
    b.write_text(sample.abort().to_json())
    assert report_command(ReportRequest((str(a), str(b)), str(tmp_path / "r.html"))) == 2
    assert "different workloads" in capsys.readouterr().err
    assert report_command(ReportRequest((str(tmp_path / "none.json"),),
                                        str(tmp_path / "r.html"))) == 2


def test_write_report_takes_results_objects(tmp_path):
    out = write_report([sample.needles()], tmp_path / "n.html")
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_charts_are_real_svg_of_a_reasonable_size():
    for sec in charts([sample.agent()], ["x"]):
        svg = str(sec.svg)
        w, h = (float(x) for x in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
        assert w > 500 and h > 150, sec.key
        paths = re.findall(r'class="(?:mk|ln)"[^>]* d="([^"]*)"', svg)
        points = sum(len(re.findall(r"[ML]-?[\d.]+,", d)) for d in paths)  # marks, vertices
        assert points > 20, sec.key


@pytest.mark.slow
def test_ten_thousand_requests_stay_under_five_megabytes(tmp_path):
    res = sample.agent(sessions=100, steps=97, subs=2)
    assert len(res.records) == 10_000
    out = write_report([res], tmp_path / "big.html")
    assert out.stat().st_size < 5e6
    assert Path(out).read_text().count("<tr") >= 10_000


# ---------------------------------------------------------------- cache theory


def theory_records(cached: list[int], lru: list[int | None] | None = None):
    """Four answered requests of 1,000 prompt tokens, 600 expected from a perfect cache."""
    lru = lru if lru is not None else [400] * len(cached)
    return [sample.record(id=f"r{i}", seq=i, t_start_s=float(i), planned_expected_cached=600,
                          planned_lru_cached=lru[i], **sample.warm(1000, 600, c))
            for i, c in enumerate(cached)]


def test_the_theory_chart_draws_measured_against_both_caches():
    from workloadlang.report import data

    recs = theory_records([0, 400, 300, 500])
    d = data.theory(recs, CacheTheory(cache_tokens=4096, cache_block=16, concurrency=2))
    assert d.measured == pytest.approx([0.0, 0.2, 700 / 3000, 0.3])
    assert d.unlimited == pytest.approx([0.6] * 4) and d.lru == pytest.approx([0.4] * 4)
    assert d.cache == "LRU 4,096 tokens / 16" and d.concurrency == 2
    res = sample.results("mooncake", "mooncake.wl", recs, gates=[], params={})
    res = res.model_copy(update={"cache_theory": CacheTheory(cache_tokens=4096, cache_block=16,
                                                             concurrency=2)})
    html = render_html([res])
    assert "theory" in chart_keys(html) and "Cache hit rate against theory" in html


def test_the_theory_chart_draws_the_perfect_caches_range():
    from workloadlang.report import data

    recs = [r.model_copy(update={"planned_expected_max": 900})
            for r in theory_records([0, 800, 900, 850], lru=[None] * 4)]
    d = data.theory(recs, CacheTheory(concurrency=4, in_flight=3))
    assert d.unlimited == pytest.approx([0.6] * 4) and d.unlimited_max == pytest.approx([0.9] * 4)
    assert d.lru is None and d.concurrency == 3
    res = sample.results("shared", "shared.wl", recs, gates=[], params={})
    html = render_html([res.model_copy(update={"cache_theory": CacheTheory(in_flight=3)})])
    assert "theory" in chart_keys(html) and "perfect cache, possible: 90.0%" in html


def test_no_theory_chart_without_a_cache_model_or_a_trace():
    from workloadlang.report import data

    assert data.theory(theory_records([0, 400], lru=[None, None]), None) is None
    assert "theory" not in chart_keys(render_html([sample.agent()]))
