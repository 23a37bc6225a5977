"""Ground truth for a machine whose speed drifts between the finalize and its baselines: an
honestly evicted context is `evicted`, never `degraded` besides; a lie stays `degraded`.

The simulator's `slow_prefill=3@*/finalize/*` makes only the finalizes' prefills 3x slower (a
host that got busy between the finalize and the baselines measured after it). agent-sim's
`restore` (and the `speed` warning) apply only when the finalize claims at least 10 % of its
prompt cached (`when`): a finalize that recomputed its whole context has no claim to judge.
The control runs the same workload with the condition taken out, and must be called
`degraded`: that is the false verdict the condition removes.
"""

from __future__ import annotations

import re

import pytest
from test_groundtruth_degraded import small, survival_agrees_with_its_report

from runhelp import gate, records, verdicts, wl_run
from workloadlang.resources import bundled_workloads

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

DRIFT = ["--sim-fault", "slow_prefill=3@*/finalize/*"]
CONDITION = " when cached_tokens{finalize} >= 10% * prompt_tokens{finalize}"


def evicting(sessions: int) -> list[str]:
    """agent-sim at `sessions` sessions on a 9k-token device without a host tier: the
    sub-agents (2 x 6k) push every 8k main context out, so each finalize recomputes it all."""
    return ["--sessions", str(sessions), "--main-tokens", "8k", "--step-tokens", "1k",
            "--sub-tokens", "6k", "--max-tokens", "16",
            "--sim-prefill-us-per-token", "10", "--sim-decode-us-per-token", "100",
            "--sim-device-tokens", "9000"]


def timings_args(timings: str) -> list[str]:
    return ["--sim-fault", "no_timings"] if timings == "client" else []


def priced(timings: str) -> list[str]:
    """Over the client's TTFT, a finalize that prefills enough of its own to price a token
    apart from a busy host's noise (40 ms at 10 us a token: 4k tokens; agent-sim's default
    keeps to a quarter of an 8k context, and `restore` would be undecidable). 5k, not 4k: the
    calibration may read the cold speed a little over the simulator's, and 4k then falls just
    short (4,016 would decide) and a degraded engine is `undecidable`."""
    return ["--finalize-tokens", "5k"] if timings == "client" else []


def unconditional(tmp_path) -> str:
    """agent-sim as it was without the condition, as a file to run."""
    text = dict(bundled_workloads())["agent-sim"].read_text(encoding="utf-8")
    assert text.count(CONDITION) == 2, "restore and speed carry the condition"
    path = tmp_path / "agent-sim-unconditional.wl"
    path.write_text(text.replace(CONDITION, ""), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("timings", ["engine", "client"])
@pytest.mark.parametrize("sessions", [1, 2])
def test_an_honest_eviction_on_a_drifting_machine_is_only_evicted(tmp_path, sessions, timings):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *evicting(sessions), *DRIFT,
                       *timings_args(timings))
    assert verdicts(res) == {f"main#{i}": "evicted" for i in range(sessions)}, res["gates"]
    assert code == 1
    for fin in records(res, "finalize"):
        assert fin["cached_tokens"] < 0.1 * fin["prompt_tokens"], "recomputed: no claim"
    for name in ("restore", "speed"):
        g = gate(res, name)
        assert g["status"] == "pass" and g["not_applicable"] == sessions, g
        assert all(r["detail"].startswith("does not apply: ") for r in g["results"])
    survival_agrees_with_its_report(res)


@pytest.mark.parametrize("timings", ["engine", "client"])
def test_without_the_condition_the_same_run_is_falsely_degraded(tmp_path, timings):
    """The control: the test above can fail. Judged without `when`, the finalize that
    recomputed its context honestly at 3x the baselines' price is called `degraded` too."""
    code, res = wl_run(tmp_path, unconditional(tmp_path), "--sim", *evicting(1), *DRIFT,
                       *priced(timings),
                       *timings_args(timings))
    assert verdicts(res) == {"main#0": "evicted, degraded"}, res["gates"]
    assert gate(res, "restore")["not_applicable"] == 0
    assert code == 1


@pytest.mark.parametrize("timings", ["engine", "client"])
@pytest.mark.parametrize("sessions", [1, 2])
def test_a_host_tier_as_slow_as_a_recompute_stays_degraded_on_a_drifting_machine(
        tmp_path, sessions, timings):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *small(sessions, timings), "--sim-fault",
                       "degraded_host", *DRIFT, *timings_args(timings))
    assert set(verdicts(res).values()) == {"degraded"}, res["gates"]
    assert code == 1
    restore = gate(res, "restore")
    assert {r["status"] for r in restore["results"]} == {"fail"}
    assert restore["not_applicable"] == 0


@pytest.mark.parametrize("timings", ["engine", "client"])
def test_a_partial_lie_on_a_drifting_machine_stays_degraded(tmp_path, timings):
    """The finalize reports about 70 % of its context cached (an 18k device keeps the head of
    the main context past the sub-agents) and recomputes all of it (`degraded` scoped to the
    finalize, so the re-reads are honest and `timing` cannot see it), 3x slower besides:
    `restore` applies and calls it `degraded`; `survival` passes (a hit)."""
    args = evicting(1) + priced(timings)
    args[args.index("9000")] = "18000"
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *args, *DRIFT,
                       "--sim-fault", "degraded@*/finalize/*", *timings_args(timings))
    (fin,) = records(res, "finalize")
    assert 0.6 < fin["cached_tokens"] / fin["expected_cached"] < 0.8, fin  # of its context
    assert verdicts(res) == {"main#0": "degraded"}, res["gates"]
    assert code == 1
    assert gate(res, "restore")["results"][0]["status"] == "fail"
    assert gate(res, "timing")["status"] == "pass"
    assert gate(res, "survival")["status"] == "pass"


# A machine that drifts (the simulator's `drift`: everything, decode included, 3x slower for a
# window), placed over the finalize (while the first one is served), over the baselines (from
# the first one, half a second: longer than a stretch, shorter than the pauses before a
# baseline is measured again) and over both (from the first finalize to the end of the run).
WINDOWS = {
    "finalize": ["--sim-fault", "drift=3@*/finalize/*"],
    "baselines": ["--sim-fault", "drift=3@*/baseline/*", "--sim-drift-seconds", "0.5"],
    "both": ["--sim-fault", "drift=3@*/finalize/*", "--sim-drift-seconds", "60"],
}
# a decode long enough (64 tokens of 200 us) that its pace tells the machine's speed
DECODE = ["--max-tokens", "64", "--sim-decode-us-per-token", "200"]


def case_args(case: str, sessions: int, timings: str = "engine") -> list[str]:
    """healthy and degraded_host: a two-tier engine whose sub-agents push every main context to
    the host (`small`); evicted: a device without a host tier the sub-agents empty."""
    if case == "evicted":
        return evicting(sessions) + DECODE
    fault = ["--sim-fault", "degraded_host"] if case != "healthy" else []
    return small(sessions, timings) + DECODE + fault


# every window with every case once, each at 1, 2 and 8 sessions across the others, with and
# without engine timings (python -m bench.verdicts --drift runs every combination 10 times)
MATRIX = [("finalize", "healthy", 1, "engine"), ("finalize", "evicted", 2, "client"),
          ("finalize", "degraded_host", 8, "engine"), ("baselines", "healthy", 2, "client"),
          ("baselines", "evicted", 8, "engine"), ("baselines", "degraded_host", 1, "client"),
          ("both", "healthy", 8, "client"), ("both", "evicted", 1, "engine"),
          ("both", "degraded_host", 2, "client")]
WANT = {"healthy": ("ok", 0), "evicted": ("evicted", 1), "degraded_host": ("degraded", 1)}


@pytest.mark.parametrize("window, case, sessions, timings", MATRIX)
def test_verdicts_hold_when_the_machine_drifts(tmp_path, window, case, sessions, timings):
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *case_args(case, sessions, timings),
                       *WINDOWS[window], *timings_args(timings))
    verdict, exit_code = WANT[case]
    assert set(verdicts(res).values()) == {verdict}, (res["gates"], verdicts(res))
    assert code == exit_code
    if case == "degraded_host":
        assert {r["status"] for r in gate(res, "restore")["results"]} == {"fail"}


def test_a_drift_over_the_baselines_is_seen_and_measured_again(tmp_path):
    """The first baseline ran in the window: it decoded about 3x slower than its finalize, so
    it was measured again after a pause, alone, and the try kept ran at the finalize's speed;
    the records and the results say so."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *case_args("degraded_host", 1),
                       *WINDOWS["baselines"])
    assert verdicts(res) == {"main#0": "degraded"} and code == 1
    first = records(res, "baseline")[0]
    assert first["attempts"] >= 2 and "slower than main#0/back/finalize/0" in \
        first["remeasured"][0], first
    assert 1 / 1.5 <= first["drift"] <= 1.5, "the try kept ran at the finalize's speed"
    assert res["client"]["remeasured_requests"] >= 1 and res["client"]["remeasures"] >= 1


def test_a_finalize_that_kept_part_of_its_context_is_not_degraded_when_the_machine_drifts(
        tmp_path):
    """The finalize keeps about 70 % of its context (an 18k device keeps the head of the main
    context past the sub-agents) and honestly recomputes the rest while the machine runs 2.8x
    slower. Priced in its own stretch, the window over it covers its price too: `ok`. Over the
    finalize alone (a window that ends with it), its baselines decoded faster than it: the
    stretch is measured again whole, its sub-agents first, at one speed, and the repeat (a hit
    again) is kept: `ok`, and the records say so."""
    args = evicting(1)
    args[args.index("9000")] = "18000"
    args += DECODE
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *args,
                       "--sim-fault", "drift=2.8@*/finalize/*", "--sim-drift-seconds", "1")
    (fin,) = records(res, "finalize")
    assert 0.6 < fin["cached_tokens"] / fin["expected_cached"] < 0.8, fin  # of its context
    assert verdicts(res) == {"main#0": "ok"}, res["gates"]
    assert code == 0
    assert "stretches_again" not in res["client"], "one speed over the stretch: no repeat"
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *args, "--sim-fault",
                       "drift=2.8@*/finalize/*")
    assert verdicts(res) == {"main#0": "ok"}, res["gates"]
    assert code == 0
    (fin,) = records(res, "finalize")
    assert 0.6 < fin["cached_tokens"] / fin["expected_cached"] < 0.8, fin
    assert re.search(r"decoded 2\.[5-9]x slower than the 3 identical requests that price it; "
                     "the second kept$", fin["remeasured"][-1]), fin["remeasured"]
    assert res["client"]["stretches_again_kept"] == 1

def test_a_finalize_that_ran_at_another_speed_is_measured_again_with_its_stretch(tmp_path):
    """Over the first finalize only (the window opens once), one healthy session: the finalize
    decoded about 3x slower than its baselines, so its sub-agents and its whole stretch were
    sent again inside its isolation, and the repeat (at one speed) was kept: `ok`, and the run
    says what it cost. With two sessions the pressure was the other's too: no repeat."""
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *case_args("healthy", 1),
                       *WINDOWS["finalize"])
    assert verdicts(res) == {"main#0": "ok"}, res["gates"]
    assert code == 0
    client = res["client"]
    assert client["stretches_again"] == 1 and client["stretches_again_kept"] == 1, client
    assert client["pressure_again"] == 2
    again = [r for r in res["records"] if any("stretch measured again" in n
                                                for n in r.get("remeasured") or [])]
    assert [r["label"] for r in again][0] == "finalize" and len(again) == 7, again
    assert client["remeasures"] >= 2 + 7, "the sub-agents and the stretch sent again"
    code, res = wl_run(tmp_path, "agent-sim", "--sim", *case_args("healthy", 2),
                       *WINDOWS["finalize"])
    assert "stretches_again" not in res["client"] and code in (0, 6), res["client"]
    assert "ok" in verdicts(res).values()
