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
