"""Ground truth on a busy machine: a healthy engine is `ok`, a real eviction exactly `evicted`
and a lie `degraded`, whatever the host does meanwhile, and a healthy engine never exits 1
because its sizes were small.

- A real CPU load (processes that spin, started and stopped by PID, `tests/cpuload.py`) placed
  over the finalize, over the baselines or over both (by when the simulator, served apart,
  answered the first finalize), against the simulator.
- agent-sim at 64 sessions, on the simulator and on one with almost no prefill cost.
- agent-sim with 2k, 4k and 8k main contexts on a simulator whose cold 4k prefill takes under
  10 ms: the re-reads `timing` reads are padded to what decides on this engine
  (`$timing_tokens`), so healthy is `ok` and a lie still `degraded`; where the sizes cannot
  decide, the run says so before sending and exits 6, never 1.
"""

from __future__ import annotations

import pytest
from test_groundtruth_drift import case_args, timings_args

from cpuload import placed_load, served_sim
from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.alone  # it reads time and owns the CPU: nothing else in flight

WANT = {"healthy": ("ok", 0), "evicted": ("evicted", 1), "degraded_host": ("degraded", 1)}
LOAD = [("over_finalize", "healthy", "engine"), ("over_finalize", "degraded_host", "client"),
        ("over_baselines", "evicted", "engine"), ("over_baselines", "healthy", "client"),
        ("both", "degraded_host", "engine"), ("both", "evicted", "client")]


@pytest.mark.parametrize("where, case, timings", LOAD)
def test_verdicts_hold_under_a_real_cpu_load(tmp_path, where, case, timings):
    rec = tmp_path / "r.jsonl"
    with served_sim([*case_args(case, 2, timings), *timings_args(timings)]) as (url, args):
        with placed_load(rec, where, n=2, url=url):
            code, res = wl_run(tmp_path, "agent-sim", *args, "--records", str(rec))
    verdict, exit_code = WANT[case]
    assert set(verdicts(res).values()) == {verdict}, (res["gates"], verdicts(res))
    assert code == exit_code


SIXTY_FOUR = ["--sessions", "64", "--main-tokens", "2k", "--step-tokens", "1k",
              "--sub-tokens", "1k", "--sub-windows", "1", "--finalize-tokens", "300",
              "--max-tokens", "16", "--baselines", "2"]


@pytest.mark.parametrize("prefill_us", ["2", "0.01"], ids=["sim", "near-zero-prefill"])
def test_sixty_four_healthy_sessions_are_all_ok(tmp_path, capsys, prefill_us):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *SIXTY_FOUR,
                       "--sim-prefill-us-per-token", prefill_us)
    bad = {s: v for s, v in verdicts(res).items() if v != "ok"}
    assert len(verdicts(res)) == 64 and not bad, (bad, [g for g in res["gates"]
                                                        if g["status"] != "pass"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("PASS")


def test_a_near_zero_prefill_without_engine_timings_is_undecidable_never_failed(tmp_path,
                                                                                  capsys):
    """The client's TTFT alone cannot tell a recompute that costs microseconds from a hit, at
    any size within the context: the calibration times ever larger cold prompts up to half the
    context and none stands out of the noise; the run says so before sending, `timing` is not
    judged, and the run exits 6 (UNVERIFIED), not 1."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *SIXTY_FOUR[:1], "2", *SIXTY_FOUR[2:],
                       "--sim-prefill-us-per-token", "0.01", "--sim-fault", "no_timings",
                       "--sim-max-model-len", "16384")
    out = capsys.readouterr().out
    assert "`timing` cannot tell a cache hit from a recompute on this engine" in out
    assert gate(res, "timing")["status"] in ("unknown", "undecidable")
    assert set(verdicts(res).values()) <= {"unverified", "undecidable"}
    assert code == res["exit_code"] == 6
    last = out.strip().splitlines()[-1]  # `restore` may be undecidable too, named first
    assert last.startswith("UNVERIFIED (no gate failed; ")
    assert "timing not decidable" in last or "timing could not be judged" in last


def fast(main: str, fault: str | None, timings: str) -> list[str]:
    """agent-sim at 2 sessions with a `main`-token context on a fast simulator (2 us a token:
    a cold 4k prefill in about 8 ms); the finalize as large as prices a token here."""
    return ["--sessions", "2", "--main-tokens", main, "--step-tokens", "1k", "--sub-tokens",
            "1k", "--max-tokens", "16",
            "--sim-prefill-us-per-token", "2", *(["--sim-fault", fault] if fault else []),
            *timings_args(timings)]


@pytest.mark.parametrize("main, fault, timings", [
    ("2k", None, "client"), ("4k", None, "engine"), ("8k", None, "client"),
    ("2k", "degraded", "engine"), ("4k", "degraded", "client"), ("8k", "degraded", "engine")])
def test_small_contexts_on_a_fast_engine_are_sized_to_decide(tmp_path, capsys, main, fault,
                                                              timings):
    """`timing`'s re-reads are padded to what decides here: healthy passes, a lie fails. Over
    the engine's own prefill time every gate decides and the healthy engine is `ok`. Over the
    client's TTFT a finalize of at most half the context prefills too few tokens to price one
    apart from a busy host's noise: `restore` is undecidable, and the run said so before
    sending, naming the size that would decide; it exits 6, never 1."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *fast(main, fault, timings))
    out = capsys.readouterr().out
    timing = gate(res, "timing")
    assert timing["status"] == ("fail" if fault else "pass")
    assert all(r["prompt_tokens"] >= 1000 for r in records(res, "reread"))
    if fault:
        assert set(verdicts(res).values()) == {"degraded"}, (res["gates"], verdicts(res))
        assert code == 1
    elif timings == "engine":
        assert set(verdicts(res).values()) == {"ok"}, (res["gates"], verdicts(res))
        assert code == 0
    else:
        assert set(verdicts(res).values()) <= {"ok", "undecidable"}, res["gates"]
        if "undecidable" in verdicts(res).values():
            assert gate(res, "restore")["status"] == "undecidable" and code == 6
            assert "`restore` cannot price a token on this engine" in out
        else:
            assert code == 0
