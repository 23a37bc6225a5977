"""Counts no engine can report are no evidence (run/record.py `impossible_counts`): the request's
cache evidence is unknown, never a 100 % HIT or a -555 % MISS, and the request that extends it
takes its expectation from the plan, not from the impossible prompt count. The API key is
redacted wherever a part of it stands (run/errors.py `redact`)."""

from __future__ import annotations

import pytest

from workloadlang import api
from workloadlang.redact import REDACTED, mentions, redact
from workloadlang.run.client import Outcome
from workloadlang.run.record import TtftReference, build_record

TEXT = """
workload w {
  session s { user filler 400; reply 8; user filler 40; reply 8 }
}
"""


@pytest.fixture(scope="module")
def reqs():
    source = api.Source(name="t.wl", text=TEXT)
    return api.make_plan(api.parse_checked(source), source, {}, salt="s").requests


def outcome(rid: str, prompt: int | None, cached: int | None, completion: int | None = 8):
    return Outcome(id=rid, t_send=0.0, t_send_unix=0.0, ttft_s=0.05, e2e_s=0.1,
                   prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion,
                   cached_source="usage.prompt_tokens_details.cached_tokens",
                   streamed_tokens=8, finish_reason="length")


def record(req, o, src_req=None, src=None):
    return build_record(req, o, src_req=src_req, src=src, hit_ratio=0.9,
                        ref=TtftReference(threshold_s=1.0, threshold_tokens=400), t0=0.0)


@pytest.mark.parametrize(("prompt", "cached", "completion", "says"), [
    (500, 10**12, 8, "> prompt_tokens"),
    (500, -555, 8, "is negative"),
    (10**12, 10**12 - 1, 8, "planned at"),
    (0, 0, 8, "prompt_tokens 0"),
    (500, 450, -7, "completion_tokens is negative"),
])
def test_an_impossible_count_leaves_the_evidence_unknown(reqs, prompt, cached, completion, says):
    first, second = reqs
    rec = record(second, outcome(second.id, prompt, cached, completion), first,
                 outcome(first.id, 420, 0))
    assert says in rec.impossible
    assert rec.cached_tokens is None and rec.cached_source == "none"
    assert rec.hit is None and rec.reuse is None and rec.missed is None and rec.ttft_agrees is None
    if cached < 0 or cached > prompt:  # the flags see the numbers as the engine reported them
        assert rec.suspicious


def test_possible_counts_are_judged(reqs):
    first, second = reqs
    rec = record(second, outcome(second.id, 480, 425), first, outcome(first.id, 420, 0))
    assert rec.impossible is None and rec.hit is True and rec.expected_source == f"engine:{first.id}"


def test_an_impossible_source_is_no_expectation(reqs):
    first, second = reqs
    rec = record(second, outcome(second.id, 480, 425), first, outcome(first.id, 10**12, 0))
    assert rec.impossible is None and rec.expected_source == "plan"


@pytest.mark.parametrize(("text", "shown"), [
    ("key sk-abcdef123456 here", f"key {REDACTED} here"),
    ("cut sk-abcdef12… here", f"cut {REDACTED}… here"),
    ("part sk-abcdef1 mid", f"part {REDACTED} mid"),
    ("ends sk-ab", "ends sk-ab"),  # under six characters: not a part of the key that counts
    ("twice sk-abcdef123456sk-abcdef123456", f"twice {REDACTED}{REDACTED}"),
])
def test_redact_takes_the_key_and_every_long_enough_beginning_of_it(text, shown):
    assert redact(text, "sk-abcdef123456") == shown


KEY21 = "sk-proj-AbCdEfGhIjKlM"  # 21 characters


@pytest.mark.parametrize(("text", "shown"), [
    # its trailing 10 characters, as an engine echoed them: was kept whole
    (f"bad key ...{KEY21[-10:]} given", f"bad key ...{REDACTED} given"),
    (f"mid {KEY21[5:13]} end", f"mid {REDACTED} end"),  # 8 from the middle
    (f"short {KEY21[5:12]} end", f"short {KEY21[5:12]} end"),  # 7: not a run that counts
    (f"two {KEY21[-9:]} and {KEY21[3:12]}.", f"two {REDACTED} and {REDACTED}."),
    (f"{KEY21[-8:]}", REDACTED),
    ("nothing of it", "nothing of it"),
])
def test_redact_takes_any_run_of_eight_characters_of_the_key(text, shown):
    assert redact(text, KEY21) == shown
    assert mentions(text, KEY21) == (text != shown)
    assert mentions(text.encode(), KEY21) == (text != shown)


def test_every_run_of_eight_of_a_repetitive_key_is_found():
    key = "sk-" + "".join(f"{i:03d}x" for i in range(100))
    for start in range(len(key) - 8):
        for size in (8, 9, 13):
            run = key[start:start + size]
            assert run not in redact(f"<{run}>", key), (start, size)
