"""The measured hit rate against what the run's own requests allow: an engine that already held
the run's text (an earlier run with the same salt) serves more than any order of the run's
requests could, and `wl run` says so; a first run on a fresh engine does not."""

from __future__ import annotations

from runhelp import wl_run_text
from workloadlang.sim import SimConfig
from workloadlang.sim import server as sim_server

TWO = """
workload two {
  session s repeat 2 {
    user filler 800
    reply 4 label opening
    user "again"
    reply 4 label again
  }
}
"""


def test_a_rerun_with_the_same_salt_on_a_warm_engine_is_flagged(tmp_path, capsys):
    handle = sim_server.start_in_process(SimConfig(max_model_len=8192))
    try:
        runs = []
        for k in range(2):
            (tmp_path / str(k)).mkdir()
            code, res = wl_run_text(tmp_path / str(k), TWO, "--base-url", handle.base_url,
                                    "--salt", "same")
            runs.append((code, res["cache_theory"], capsys.readouterr().out))
    finally:
        handle.stop()
    (code0, first, out0), (code1, second, out1) = runs
    assert code0 == code1 == 0
    assert first["served_before_run_tokens"] == 0 and "NOTE: the engine served" not in out0
    assert first["measured"] <= first["unlimited"] + 0.01
    # the openings were served from the first run: ~1,600 tokens no order of this run allows
    assert second["measured"] > 0.9 and second["unlimited"] < 0.6
    assert second["served_before_run_tokens"] >= 1500
    assert "NOTE: the engine served" in out1 and "the same salt" in out1


def test_the_line_puts_measured_certain_and_possible_side_by_side():
    from workloadlang.resultsmodels import CacheTheory
    from workloadlang.theory import theory_line as line_of

    def theory_line(fields: dict[str, object]) -> str | None:
        return line_of(CacheTheory.model_validate(fields))

    base = {"requests": 32, "measured": 0.943, "certain": 0.653, "possible": 0.975,
            "in_flight": 32, "range": "within"}
    assert theory_line(base) == (
        "cache hit rate over 32 request(s), of prompt tokens: measured 94.3%; a perfect cache: "
        "certain 65.3%, possible 97.5% (measured within the range); up to 32 requests in "
        "flight at once, the theory takes them one at a time")
    below = {**base, "measured": 0.5, "range": "below", "in_flight": 1}
    assert "(measured below the certain share: the engine kept less)" in theory_line(below)
    assert "in flight" not in theory_line(below)
    alone = {**base, "possible": None, "measured": 0.653}
    assert "a perfect cache: certain 65.3%, possible 65.3% (measured within" in theory_line(alone)


def test_where_the_measured_share_falls_allows_for_the_engines_blocks():
    from workloadlang.theory import where

    # 10 requests of 1,000 prompt tokens, 6,000 certain: 32 tokens a request and 0.5% slack
    assert where(5700, 6000, 10, 10_000, False) == "within"
    assert where(5600, 6000, 10, 10_000, False) == "below"
    assert where(9900, 6000, 10, 10_000, True) == "above"
    assert where(0, 0, 0, 0, False) is None


def test_a_run_measures_within_the_perfect_caches_range(tmp_path, capsys):
    shared = """workload shared {
      text prompt = "You are a support agent.", filler 2k
      session s repeat 6 arrive every 100ms { system $prompt; user filler 50; reply 4 }
    }"""
    code, res = wl_run_text(tmp_path, shared, "--sim", "--salt", "range")
    out = capsys.readouterr().out
    theory = res["cache_theory"]
    assert code == 0 and theory["range"] == "within"
    assert theory["unlimited"] == theory["certain"] == 0 < theory["measured"]
    assert theory["measured"] <= theory["possible"] and theory["unlimited_max"] > 0.5
    line = next(x for x in out.splitlines() if x.startswith("cache hit rate over"))
    assert f"measured {100 * theory['measured']:.1f}%; a perfect cache: certain 0.0%, " \
           f"possible {100 * theory['possible']:.1f}% (measured within the range)" in line
