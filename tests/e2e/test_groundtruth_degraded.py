"""Ground truth for degradation: an engine that reports cached tokens it pays for like a
prefill is `degraded` (exit 1), a healthy two-tier one is `ok` (exit 0), at 1, 2 and 8
sessions, with the engine's own prefill times and without them (the client's TTFT then being
the only one, as with vLLM and SGLang).

Two forms of the lie, on the simulator: `degraded` recomputes the whole prompt on every request,
`degraded_host` only the blocks it restores from its host tier (a host tier as slow as a
recompute). The device holds every session's main context while it grows, and the sub-agents
push it out to the host, so each finalize restores its context from there.
"""

from __future__ import annotations

import pytest

from runhelp import gate, records, verdicts, wl_run

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most


def small(sessions: int, timings: str = "engine") -> list[str]:
    """agent-sim at `sessions` sessions, sized so each session's sub-agents (2 x 6k, 2 x 12k
    beside a 16k context) push its main context out of a device that holds every main context
    (2k more a session), with the
    finalize agent-sim sizes to price a token here (`max(2k, $timing_tokens)`, a quarter of
    the context at most). Over the engine's own prefill time an 8k context and a 2k finalize
    decide; over the client's TTFT a finalize must prefill 40 ms (about 3.6k tokens) to price a
    token apart from a busy host's noise, and the context must be four times that for a lie
    about it to stand out of the allowance for the finalize's own work: 16k."""
    main = 8_000 if timings == "engine" else 16_000
    return ["--sessions", str(sessions), "--main-tokens", str(main), "--step-tokens", "2k",
            "--sub-tokens", str(main * 3 // 4), "--max-tokens", "16",
            "--sim-prefill-us-per-token", "10", "--sim-decode-us-per-token", "100",
            "--sim-device-tokens", str(sessions * (main + 2_000) + 2_000),
            "--sim-host-tokens", "400000", "--sim-host-restore-us-per-token", "0.2"]


def survival_agrees_with_its_report(res: dict) -> None:
    """`survival` (per session) and `finalize_survival` (the report) read one definition of a
    hit: the report is the share of sessions that pass, and a finalize printed MISS fails."""
    scopes = gate(res, "survival")["results"]
    passed = sum(r["status"] == "pass" for r in scopes)
    assert res["report"]["finalize_survival"] == pytest.approx(passed / len(scopes))
    for fin in records(res, "finalize"):
        scope = next(r for r in scopes if r["scope"] == fin["session"])
        assert (scope["status"] == "pass") == (fin["hit"] is True), (fin["id"], scope)


# every number of sessions with every fault (none, `degraded`, `degraded_host`) once, and each
# of those with the engine's timings and without them: every pair of the three factors (the
# whole 3 x 3 x 2 matrix, ten times: python -m bench.busy_verdicts --only quiet)
MATRIX = [(1, None, "engine"), (1, "degraded", "client"), (1, "degraded_host", "engine"),
          (2, None, "client"), (2, "degraded", "engine"), (2, "degraded_host", "client"),
          (8, None, "client"), (8, "degraded", "engine"), (8, "degraded_host", "engine")]


@pytest.mark.parametrize("sessions, fault, timings", MATRIX)
def test_agent_sim_degradation_ground_truth(tmp_path, sessions, fault, timings):
    args = small(sessions, timings)
    if fault:
        args += ["--sim-fault", fault]
    if timings == "client":
        args += ["--sim-fault", "no_timings"]
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *args)
    want = "degraded" if fault else "ok"
    assert set(verdicts(res).values()) == {want}, (res["gates"], verdicts(res))
    assert code == (1 if fault else 0)
    for g in res["gates"]:
        if g["severity"] == "fail":
            assert g["status"] != "unknown" and g["unknown"] == 0, g
    source = "server" if timings == "engine" else "client_ttft"
    timed = records(res, "finalize") + records(res, "baseline") + records(res, "cached")
    assert all(r["isolated"] and r["prefill_source"] == source for r in timed)
    assert all(r["ttft_contended_s"] == 0 for r in timed), "alone, by construction"
    if fault == "degraded_host":  # the finalize came back from the host: the restore gate
        assert {r["status"] for r in gate(res, "restore")["results"]} == {"fail"}
        assert all(r["cached_tokens"] > 0.9 * r["expected_cached"]
                   for r in records(res, "finalize")), "reported as cached"
    if fault == "degraded":  # everything recomputed: the cached re-read is as slow as cold
        assert {r["status"] for r in gate(res, "timing")["results"]} == {"fail"}
    survival_agrees_with_its_report(res)


# the issue's case, as a new user would try it: 2 sessions whose main contexts do not both
# fit the device, a host tier that restores at the cost of a prefill
ISSUE = ["--sessions", "2", "--main-tokens", "20000", "--step-tokens", "2000",
         "--sub-tokens", "8000", "--sim-device-tokens", "30000",
         "--sim-host-tokens", "300000", "--sim-prefill-us-per-token", "20", "--salt", "demo"]


@pytest.mark.parametrize("timings", [[], ["--sim-fault", "no_timings"]], ids=["engine", "client"])
@pytest.mark.parametrize("restore_us, want", [("20", "degraded"), ("0.2", "ok")])
def test_a_host_tier_as_slow_as_a_recompute_is_degraded(tmp_path, timings, restore_us, want):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *ISSUE,
                       "--sim-host-restore-us-per-token", restore_us, *timings)
    assert set(verdicts(res).values()) == {want}, res["gates"]
    assert code == (1 if want == "degraded" else 0)
    survival_agrees_with_its_report(res)


def test_the_matrix_covers_every_pair_of_its_factors():
    """Each factor's every value meets each other factor's every value in some run."""
    values = [{1, 2, 8}, {None, "degraded", "degraded_host"}, {"engine", "client"}]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert {(row[a], row[b]) for row in MATRIX} == {(x, y) for x in values[a]
                                                        for y in values[b]}
