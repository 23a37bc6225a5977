"""Ground truth for goodput and load on the simulator, run as a user runs them:

- goodput where the simulator's costs put a known set of requests over the SLO;
- the highest rate a simulator of known service capacity sustains, found by `--search`, against
  the queueing arithmetic;
- `chat-rate` passes its SLO gates at its default rate.

Each reads time, to the scale of its prefills (tens of milliseconds): beside another `paired`
test at most. The ITL and TPOT against the simulator's emission times, read to a tenth of a
millisecond, are in test_groundtruth_itl.py, alone. The load options that do not read time (a
duration, turns' lag, the bundled workloads' metrics, bad input) are in test_run_load.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runhelp import wl_run, wl_run_text
from workloadlang import api
from workloadlang.cli.main import main

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

# ---------------------------------------------------------------- goodput with a known split

SPLIT = """
workload split {
  concurrency = 1
  slo { ttft = 150ms, attainment = 50% }
  session quick repeat 6 { user filler 20; reply 4 label quick }
  session slow repeat 3 { user filler 300; reply 4 label slow }
  gates {
    good: overall fraction(slo_met{quick}) == 1
    bad: overall count(slo_met{slow}) == 0
  }
}
"""


def test_goodput_where_the_costs_put_a_known_set_over_the_bound(tmp_path: Path) -> None:
    # prefill 1 ms a token: a quick prompt (~25 tokens) ~25 ms, a slow one (~305) ~305 ms
    code, res = wl_run_text(tmp_path, SPLIT, "--sim", "--sim-prefill-us-per-token", "1000",
                            "--sim-prefill-ctx-scale", "0", "--sim-slots", "1")
    assert code == 0, res.get("gates")
    met = {r["session"]: r["slo_met"] for r in res["records"]}
    assert [s for s, m in met.items() if not m] == ["slow#0", "slow#1", "slow#2"]
    g = res["performance"]["goodput"]
    assert (g["met"], g["judged"]) == (6, 9)
    assert g["attainment"] == pytest.approx(6 / 9) and g["sustained"] is True
    assert g["rate"] == pytest.approx(6 / res["performance"]["window_s"])


# ---------------------------------------------------------------- the highest sustained rate

CAPACITY = """
workload capacity {
  params { rate: float = 5 in 0.01..; n: int = 200 }
  duration = 3s
  slo { ttft = 150ms, attainment = 90% }
  session q repeat $n turns every 1s / $rate { user filler 90; reply 10 }
}
"""


@pytest.mark.slow
def test_the_rate_search_finds_the_queueing_arithmetics_capacity(tmp_path: Path) -> None:
    """The simulator serves S = 2 requests at once, each a prefill of P prompt tokens at
    c = 1 ms a token (flat) then T = 10 tokens, the first right after the prefill and each next
    one d = 10 ms later: a request holds its slot for s = P * c + (T - 1) * d, and the engine
    serves mu = S / s requests a second. Arrivals are evenly spaced (`turns every 1s / $rate`,
    one request per copy: open loop). Below mu no request waits (D/D/2), so every TTFT is the
    prefill, P * c ~ 95 ms, under the 150 ms bound. Above mu the queue grows by (lambda - mu)
    a second: a request sent at t waits (lambda / mu - 1) * t, and it meets the bound while
    that is under m = 150 ms - P * c; the run of D = 3 s sustains lambda while 90 % of its
    requests do: m / (lambda / mu - 1) >= 0.9 * D, lambda <= mu * (1 + m / (0.9 * D)), about 2 %
    above mu. So the highest rate sustained is mu, to the search's 5 %, within 10 %. (A longer
    run narrows the 2 %, which the 10 % does not need; each of the search's 7 points runs D.)"""
    wl = tmp_path / "capacity.wl"
    wl.write_text(CAPACITY)
    source = api.Source(name=str(wl), text=CAPACITY)
    plan = api.make_plan(api.parse_checked(source), source, {}, salt="a",
                         env={"max_context": 65536})
    prompt = plan.requests[0].prompt_tokens  # P: the filler, the template and its markers
    s = prompt * 0.001 + (10 - 1) * 0.010
    mu = 2 / s
    assert 9.5 < mu < 11.5  # ~10.5 a second: about 0.19 s a request on 2 slots
    out = tmp_path / "search.json"
    code = main(["run", str(wl), "--sim", "--no-viz", "--salt", "cap", "--output", str(out),
                 "--search", "rate=4..20", "--sim-slots", "2",
                 "--sim-prefill-us-per-token", "1000", "--sim-prefill-ctx-scale", "0",
                 "--sim-decode-us-per-token", "10000"])
    from workloadlang.sweepresults import read_any

    res = read_any(out)
    assert code == 0 and res.search is not None
    found = res.search.highest
    assert found is not None and abs(found - mu) <= 0.10 * mu, (found, mu, res.search)
    assert [float(v) for v in res.values] == sorted(float(v) for v in res.values)
    # every point carries the curve's figures: TTFT and ITL percentiles, goodput, the cache
    for p in res.points:
        assert p.performance.ttft.p99 and p.performance.itl.p50
        assert p.performance.goodput.attainment is not None and p.performance.hit_rate == 0


def test_chat_rate_meets_its_slos_at_its_default_rate(tmp_path: Path) -> None:
    code, res = wl_run(tmp_path, "chat-rate", "--sim", "--salt", "c", "--users", "16",
                       "--length", "6s", "--warm", "1s")
    assert code == 0, [g for g in res["gates"] if g["status"] != "pass"]
    g = res["performance"]["goodput"]
    assert g["attainment"] >= 0.9 and g["rate"] > 4
    assert res["performance"]["excluded"] > 0
    assert res["performance"]["hit_rate"] > 0.8  # the shared prompt and the history
