"""Ground truth for latency, goodput and load on the simulator, run as a user runs them:

- the ITL and TPOT `wl run` records against the simulator's own emission times (its emission
  log) at a known decode step;
- goodput where the simulator's costs put a known set of requests over the SLO;
- the highest rate a simulator of known service capacity sustains, found by `--search`, against
  the queueing arithmetic;
- a duration that ends the run, turns that wait for their predecessor and record the lag;
- the bundled workloads report the new metrics with their files unchanged; `chat-rate` passes
  its SLO gates at its default rate;
- bad input (an SLO in a wrong unit, a rate of 0, a negative duration, a search that cannot be
  run) is refused before any request is sent, exit 2.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import httpx
import pytest

from faultserver import FaultServer
from runhelp import wl_run, wl_run_text
from workloadlang import api
from workloadlang.cli.main import main
from workloadlang.results import ListSink
from workloadlang.sim import SimConfig, start_in_process

# ---------------------------------------------------------------- ITL against the emission log

STREAMS = """
workload streams {
  concurrency = 8
  session s repeat 8 { user "Tell me a story."; reply 40 label story }
}
"""


@pytest.mark.alone
def test_client_itl_and_tpot_match_the_simulators_emission_times() -> None:
    cfg = SimConfig(prefill_us_per_token=0, decode_us_per_token=5000, slots=16, emission_log=64)

    async def go(base: str) -> ListSink:
        source = api.Source(name="streams.wl", text=STREAMS)
        plan = api.make_plan(api.parse_checked(source), source, {}, salt="itl",
                             env={"max_context": 65536})
        sink = ListSink()
        async with api.open_engine(base, sim=True) as engine:
            await api.run_workload(plan, engine, sink)
        return sink

    with start_in_process(cfg) as sim:
        sink = asyncio.run(go(sim.base_url))
        emitted = httpx.get(f"{sim.root_url}/sim/emissions").json()["requests"]
    errors, client, server, tpots = [], [], [], []
    for r in sink.records:
        times = emitted[r.id]
        assert len(times) == 40 and len(r.itl_s) == 39, r.id
        gaps = [b - a for a, b in zip(times, times[1:])]
        errors += [abs(c - s) for c, s in zip(r.itl_s, gaps)]
        client += r.itl_s
        server += gaps
        tpots.append((r.tpot_s, (times[-1] - times[0]) / 39))
    assert len(errors) == 8 * 39
    # the decode step is 5 ms: both sides see it, and the client each gap as the server wrote it
    assert statistics.median(server) == pytest.approx(0.005, abs=0.0005)
    assert statistics.median(client) == pytest.approx(statistics.median(server), abs=1e-4)
    assert statistics.median(errors) < 1e-4
    for mine, theirs in tpots:  # TPOT runs to the answer's end: at most a read later
        assert mine == pytest.approx(theirs, abs=0.002)


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


@pytest.mark.alone
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
  duration = 6s
  slo { ttft = 150ms, attainment = 90% }
  session q repeat $n turns every 1s / $rate { user filler 90; reply 10 }
}
"""


@pytest.mark.slow
@pytest.mark.alone
def test_the_rate_search_finds_the_queueing_arithmetics_capacity(tmp_path: Path) -> None:
    """The simulator serves S = 2 requests at once, each a prefill of P prompt tokens at
    c = 1 ms a token (flat) then T = 10 tokens, the first right after the prefill and each next
    one d = 10 ms later: a request holds its slot for s = P * c + (T - 1) * d, and the engine
    serves mu = S / s requests a second. Arrivals are evenly spaced (`turns every 1s / $rate`,
    one request per copy: open loop). Below mu no request waits (D/D/2), so every TTFT is the
    prefill, P * c ~ 95 ms, under the 150 ms bound. Above mu the queue grows by (lambda - mu)
    a second: a request sent at t waits (lambda / mu - 1) * t, and it meets the bound while
    that is under m = 150 ms - P * c; the run of D = 6 s sustains lambda while 90 % of its
    requests do: m / (lambda / mu - 1) >= 0.9 * D, lambda <= mu * (1 + m / (0.9 * D)), under 1 %
    above mu. So the highest rate sustained is mu, to the search's 5 %, within 10 %."""
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


# ---------------------------------------------------------------- duration and turns


def test_the_duration_ends_the_run_and_the_run_is_complete(tmp_path: Path) -> None:
    text = """
workload d {
  duration = 1500ms
  session s { repeat 5 label step { user "x"; reply 2; wait 500ms } }
}
"""
    code, res = wl_run_text(tmp_path, text, "--sim")
    assert code == 0 and res["incomplete"] is None
    sent = [r for r in res["records"] if not r["skipped"]]
    skipped = [r for r in res["records"] if r["skipped"]]
    assert 2 <= len(sent) <= 3 and len(sent) + len(skipped) == 5
    assert all("due after the run's duration (1.5s)" in r["skipped"] for r in skipped)
    assert max(r["t_start_s"] for r in sent) < 1.5


def test_a_turn_waits_for_its_predecessor_and_records_the_lag(tmp_path: Path) -> None:
    text = """
workload lag {
  session u repeat 2 turns every 50ms { repeat 3 label turn { user "x"; reply 4 } }
}
"""
    # each answer takes 300 ms: the instants (every 50 ms) outrun it
    with FaultServer() as server:
        server.defaults = {"x-fault": "slow", "x-tokens": "4", "x-interval-ms": "100"}
        code, res = wl_run_text(tmp_path, text, "--base-url", server.base_url)
    assert code == 0
    by_id = {r["id"]: r for r in res["records"]}
    for copy in ("u#0", "u#1"):
        for k in (1, 2):
            this, before = by_id[f"{copy}/turn/{k}"], by_id[f"{copy}/turn/{k - 1}"]
            assert this["t_start_s"] >= before["t_start_s"] + before["e2e_s"] - 1e-6
            assert this["schedule_lag_s"] > 0.15  # planned 100 ms after, sent 300 ms after
    assert res["performance"]["schedule_lag"]["max"] > 0.3


# ---------------------------------------------------------------- the bundled workloads

QUICK = {
    "cache-pressure": ["--kv-size", "16384", "--context-tokens", "2048"],
    "needle-test": ["--lengths", "2000,4000"],
    "agent-sim": ["--sessions", "1", "--main-tokens", "4k", "--step-tokens", "1k",
                  "--sub-tokens", "1k", "--finalize-tokens", "500"],
    "abort-sim": ["--context-tokens", "4k", "--runs", "1"],
    "perf-sim": ["--step-tokens", "4k", "--steps", "2", "--runs", "1"],
    "shared-prompt": ["--sessions", "2", "--system-tokens", "1k", "--turns", "1"],
    "tenant-flood": ["--victim-tokens", "4k", "--tenants", "4", "--tenant-tokens", "1k",
                     "--think", "100ms"],
    "idle-resume": ["--sessions", "1", "--fill-tokens", "2k", "--traffic-tokens", "1k",
                    "--idle", "1s", "--step-tokens", "1k"],
    "coding-agent": ["--sessions", "1", "--tasks", "1", "--subagents", "1", "--drafts", "1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICK))
def test_the_bundled_workloads_report_the_new_metrics(tmp_path: Path, name: str) -> None:
    code, res = wl_run(tmp_path, name, "--sim", "--salt", "m", *QUICK[name])
    assert code in (0, 1), (name, res.get("incomplete"))
    p = res["performance"]
    assert p["requests"] > 0 and p["ttft"]["p50"] > 0 and p["e2e"]["p99"] > 0
    assert p["request_rate"] > 0 and p["concurrency"]["max"] >= 1
    answered = [r for r in res["records"] if not r["skipped"] and not r["error"]]
    longer = [r for r in answered if r["streamed_tokens"] >= 2]  # probes and needles give one
    assert all(len(r["itl_s"]) == r["streamed_tokens"] - 1 for r in longer)
    assert (p["itl"] is not None) == bool(longer) and (p["tpot"] is not None) == bool(longer)


@pytest.mark.alone
def test_chat_rate_meets_its_slos_at_its_default_rate(tmp_path: Path) -> None:
    code, res = wl_run(tmp_path, "chat-rate", "--sim", "--salt", "c", "--users", "16",
                       "--length", "6s", "--warm", "1s")
    assert code == 0, [g for g in res["gates"] if g["status"] != "pass"]
    g = res["performance"]["goodput"]
    assert g["attainment"] >= 0.9 and g["rate"] > 4
    assert res["performance"]["excluded"] > 0
    assert res["performance"]["hit_rate"] > 0.8  # the shared prompt and the history


# ---------------------------------------------------------------- bad input, exit 2


@pytest.mark.parametrize("text, flags, said", [
    ("slo { ttft = 2 }", [], "error[WL301]: the SLO `ttft` must be a duration"),
    ("slo { ttft = 95% }", [], "error[WL301]: the SLO `ttft` must be a duration"),
    ("duration = -5s", [], "error[WL305]: `duration` must be above 0s"),
    ("params { d: float = 1 }\n duration = 1s * $d", ["--d", "-5"],
     "error[WL401]: `duration` must be above 0s"),
    ("params { rate: float = 1 in 0.01.. }", ["--rate", "0"], "error[WL401]"),
])
def test_bad_load_input_is_refused_before_anything_is_sent(tmp_path: Path, capsys, text,
                                                           flags, said) -> None:
    body = text + '\n session s repeat 2 turns every 1s { user "x"; reply 2 }'
    wl = tmp_path / "bad.wl"
    wl.write_text("workload bad {\n" + body + "\n}\n")
    with FaultServer() as server:
        code = main(["run", str(wl), "--base-url", server.base_url, "--no-viz", *flags])
        assert server.chat_requests() == []
    assert code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("search, said", [
    ("rate=0..10", "LOW must be above 0 and under HIGH (a rate of 0 sends nothing)"),
    ("rate=8..4", "LOW must be above 0 and under HIGH"),
    ("rate", "write NAME=LOW..HIGH"),
    ("speed=1..4", "not a number param of this workload (its number params: rate)"),
])
def test_a_search_that_cannot_be_run_is_refused(tmp_path: Path, capsys, search, said) -> None:
    wl = tmp_path / "s.wl"
    wl.write_text('workload s {\n params { rate: float = 1 in 0.01.. }\n slo { ttft = 1s }\n'
                  ' session q repeat 2 turns every 1s / $rate { user "x"; reply 2 }\n}\n')
    with FaultServer() as server:
        code = main(["run", str(wl), "--base-url", server.base_url, "--no-viz",
                     "--search", search])
        assert server.requests == []  # not even discovery
    assert code == 2 and said in capsys.readouterr().err


def test_a_search_needs_slos(tmp_path: Path, capsys) -> None:
    wl = tmp_path / "s.wl"
    wl.write_text('workload s {\n params { rate: float = 1 in 0.01.. }\n'
                  ' session q repeat 2 turns every 1s / $rate { user "x"; reply 2 }\n}\n')
    assert main(["run", str(wl), "--sim", "--search", "rate=1..4"]) == 2
    assert "declares no SLOs" in capsys.readouterr().err
