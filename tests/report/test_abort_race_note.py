"""The footer's NOTE on a miss that came right after the aborted request it extends: on an
engine that may run several requests at once, such a re-prompt can reach it before the
disconnect does and land in another slot (the original abort-sim's false alarm). The verdict
stays what the engine reported; the note says what the user can try (a longer settle)."""

from __future__ import annotations

import pytest

from workloadlang.api import load, make_plan, parse_checked
from workloadlang.console.format import after_abort_misses
from workloadlang.console.lines import footer
from workloadlang.results import Record, Results
from workloadlang.run.record import base_record


def abort_results(gap_s: float, hit: bool, slots: int | None) -> Results:
    """Output: abort-sim results (one run): the prime aborted after 4 s, the re-prompt sent
    `gap_s` after its close, a hit or a miss, on an engine of `slots`."""
    source = load("abort-sim")
    plan = make_plan(parse_checked(source), source, {"runs": "1", "context_tokens": "1k"},
                     salt="t")
    prime, reprompt = plan.requests
    recs = [Record(**base_record(prime), aborted=True, t_start_s=0.0, e2e_s=4.0),
            Record(**base_record(reprompt), t_start_s=4.0 + gap_s, e2e_s=0.5, hit=hit,
                   prompt_tokens=1100, cached_tokens=1000 if hit else 14)]
    return Results(workload=plan.workload, source=plan.source, params={}, salt=plan.salt,
                   plan_hash=plan.plan_hash, engine={"slots": slots},
                   started_at="2026-01-01T00:00:00+00:00", elapsed_s=5.0,
                   hit_ratio=plan.hit_ratio, calibration={}, metrics={}, client={},
                   incomplete=None, exit_code=1, gates=[], verdicts={}, report={},
                   records=recs)


def test_a_miss_right_after_the_abort_on_a_multi_slot_engine_is_noted() -> None:
    res = abort_results(0.0003, hit=False, slots=4)
    assert after_abort_misses(res.records, 4) == [("main#0/reprompt/0", pytest.approx(0.0003))]
    assert "NOTE: 1 miss(es) came 0.3 ms after the aborted request they extend was closed: " \
        "an engine that runs several requests at once may not have processed the disconnect " \
        "yet" in footer(res)
    assert "miss(es) came" in footer(abort_results(0.02, hit=False, slots=None))  # unknown


def test_no_note_where_the_race_cannot_explain_the_miss() -> None:
    assert "miss(es)" not in footer(abort_results(0.0003, hit=False, slots=1))  # one at a time
    assert "miss(es)" not in footer(abort_results(0.5, hit=False, slots=4))  # after a settle
    assert "miss(es)" not in footer(abort_results(0.0003, hit=True, slots=4))  # not a miss


def test_the_report_s_evidence_row_says_it_too() -> None:
    from workloadlang.report.tables import evidence

    rows = {row[1]: row for row in evidence(abort_results(0.0003, False, 4), "run")["rows"]}
    assert "sent 0.3 ms after the aborted request it extends was closed" \
        in rows["main#0/reprompt/0"][-1]
    rows = {row[1]: row for row in evidence(abort_results(0.5, False, 4), "run")["rows"]}
    assert "aborted request it extends" not in rows["main#0/reprompt/0"][-1]
