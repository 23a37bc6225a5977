"""The client's inter-token latency: every gap between token events, from each chunk's arrival on
the injected clock, and what a record derives from it (ITL spread, TPOT, output speed).
docs/metrics.md."""

from __future__ import annotations

import pytest
from test_client import DONE, delta, ev, finish, run_send, usage

from workloadlang.run.record import timing
from workloadlang.run.sse import gaps


def test_every_gap_between_token_events_is_kept() -> None:
    out = run_send([
        (0.020, ev(delta(role="assistant", content=""))),  # no token: no gap starts here
        (0.200, ev(delta(reasoning_content="a"))),
        (0.250, ev(delta(content="b"))),
        (0.310, ev(delta(content="c")) + ev(delta(content="d"))),  # one read: one time
        (0.400, ev(delta(tool_calls=[{"index": 0, "function": {"name": "f"}}]))),
        (0.410, ev(finish())),
        (0.420, ev(usage(50, 5))),
        (0.430, DONE),
    ])
    assert out.error is None and out.streamed_tokens == 5
    assert out.itl_s == pytest.approx([0.05, 0.06, 0.0, 0.09])
    assert out.ttft_s == pytest.approx(0.2)


def test_a_single_token_has_no_gap() -> None:
    out = run_send([(0.1, ev(delta(content="x"))), (0.2, ev(finish())), (0.3, DONE)])
    assert out.itl_s == []
    assert timing(out)["itl_s"] is None and timing(out)["tpot_s"] is None


def test_the_record_has_the_spread_tpot_and_output_speed() -> None:
    pieces = [(0.1 + 0.01 * i, ev(delta(content=f"w{i}"))) for i in range(11)]
    out = run_send([*pieces, (0.21, ev(finish())), (0.22, ev(usage(50, 11))), (0.25, DONE)])
    got = timing(out)
    assert got["itl_s"] == pytest.approx([0.01] * 10)
    assert got["itl"].n == 10 and got["itl"].p50 == pytest.approx(0.01)
    # (e2e - ttft) / (tokens - 1): from the first token's arrival to the answer's end
    assert got["tpot_s"] == pytest.approx((0.25 - 0.1) / 10)
    assert got["output_tps"] == pytest.approx(11 / 0.25)


def test_tpot_counts_the_engines_tokens_not_the_events() -> None:
    # an engine that sends two tokens per event: 6 events, 12 tokens by its count
    pieces = [(0.1 + 0.02 * i, ev(delta(content=f"w{i}"))) for i in range(6)]
    out = run_send([*pieces, (0.2, ev(finish())), (0.2, ev(usage(50, 12))), (0.2, DONE)])
    got = timing(out)
    assert got["itl"].p50 == pytest.approx(0.02)  # the gaps between events
    assert got["tpot_s"] == pytest.approx(0.1 / 11)  # half of it: tokens, not events


def test_gaps_are_never_negative() -> None:
    assert gaps([1.0, 1.5, 1.5, 2.25]) == [0.5, 0.0, 0.75]
    assert gaps([]) == [] and gaps([3.0]) == []
