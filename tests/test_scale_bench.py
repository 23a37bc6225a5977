"""bench/scale.py's reading of a run's records: cohorts of answers that end together, and how
many earlier answers still waited when the worst session gap's answer ended (the run itself is
a bench, not a test)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench"))

from scale import describe_cohorts, end_cohorts, start_span_ms  # noqa: E402


def rec(session: str, start: float, e2e: float | None) -> dict:
    return {"session": session, "t_start_s": start, "e2e_s": e2e}


def test_answers_ending_less_than_2_ms_apart_form_one_cohort() -> None:
    """Sessions a, b, c end at 1.000, 1.001, 1.0027 s (a chain of gaps under 2 ms) and send again
    0.5, 1.0 and 3 ms later; d ends alone at 1.010 s; e's only request has no next one; f's
    answer failed without a duration (no end to go on from)."""
    recs = [rec("a", 0.0, 1.0), rec("a", 1.0005, 0.1),
            rec("b", 0.0, 1.001), rec("b", 1.002, 0.1),
            rec("c", 0.0, 1.0027), rec("c", 1.0057, 0.1),
            rec("d", 0.0, 1.010), rec("d", 1.0101, 0.1),
            rec("e", 0.0, 1.0), rec("f", 0.0, None), rec("f", 1.2, 0.1)]
    cohorts = end_cohorts(recs)
    assert [[round(e, 4) for e, _ in c] for c in cohorts] == [[1.0, 1.001, 1.0027], [1.01]]
    assert [round(g, 3) for _, g in cohorts[0]] == [0.5, 1.0, 3.0]
    text = describe_cohorts(cohorts)
    assert "largest cohort 3 answers" in text
    # when c's answer ended (1.0027 s) a and b had sent already: none was waiting
    assert "worst gap (3.0 ms) followed an end at 1.003 s, when 0 answers" in text


def test_the_worst_gap_counts_the_earlier_answers_still_waiting_when_it_ended() -> None:
    """Four answers end 0.1 ms apart and their sessions send 2, 4, 6 and 8 ms later (turned
    around one by one): when the last one ended, the three before it were still waiting."""
    recs = []
    for i, name in enumerate("abcd"):
        end = 1.0 + i * 0.0001
        recs += [rec(name, 0.0, end), rec(name, 1.0 + 0.002 * (i + 1), 0.1)]
    text = describe_cohorts(end_cohorts(recs))
    assert text.startswith("largest cohort 4 answers")
    assert "when 3 answers that ended before it still waited" in text
    assert describe_cohorts([]) == "no session sent after an answer"


def test_the_start_span_runs_from_the_first_to_the_last_sessions_first_send() -> None:
    recs = [rec("a", 0.0002, 1.0), rec("a", 1.1, 0.1), rec("b", 0.0051, 1.0),
            rec("c", 0.0013, 1.0), {"session": "d", "t_start_s": None, "e2e_s": None}]
    assert round(start_span_ms(recs), 3) == 4.9
    assert start_span_ms([]) is None
