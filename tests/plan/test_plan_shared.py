"""plan: content shared across sessions: named texts (`text NAME = ...`), string expressions as
message parts, `$copy`, and identical literal prompts in concurrent sessions.

Input: small `.wl` texts. Output checked: the planned segments (filler keys), the realised
messages (byte-identical where shared), `exp. cached` / `exp. max` and the `assumes:` note, and
the check diagnostics of misuse.
"""

from __future__ import annotations

import pytest
from test_plan_semantics import plan_of

from checkhelp import check_codes
from workloadlang.plan.dryrun import render_plan
from workloadlang.plan.prefix import END_TOKENS, HEADER_TOKENS
from workloadlang.plan.realise import Realiser

SHARED = """workload shared {
  params { n: int = 3; system_tokens: tokens = 2k }
  text system_prompt = "You are terse.", filler $system_tokens
  session user repeat $n {
    system $system_prompt
    user filler 500
    reply 8
  }
}"""


def system_text(plan, realiser, req) -> str:
    return realiser.messages(req, {})[0]["content"]


def test_a_named_text_is_the_same_bytes_in_every_session():
    plan = plan_of(SHARED)
    realiser = Realiser(plan)
    texts = {system_text(plan, realiser, r) for r in plan.requests}
    assert len(texts) == 1 and len(next(iter(texts)).split()) > 1900
    keys = {s.key for r in plan.requests for i in plan.message_ids(r)
            for s in plan.messages[i].segs if s.kind == "filler"}
    # one key for the shared text, one per session for its own filler
    assert "text:system_prompt/1" in keys and len(keys) == 1 + 3


def test_concurrent_sessions_sharing_a_text_expect_it_only_as_a_maximum():
    plan = plan_of(SHARED)
    shared = HEADER_TOKENS + 4 + 2000 + END_TOKENS + HEADER_TOKENS  # + the next user header
    for r in plan.requests:
        assert r.expected_cached == 0
        assert r.expected_cached_max == shared
    assert "share up to" in plan.assumptions[0]
    text = render_plan(plan)
    assert "exp. max" in text and "assumes:" in text


def test_after_a_barrier_the_shared_text_is_expected():
    plan = plan_of("""workload w {
      text sys = filler 1k
      session u repeat 3 {
        if $copy == 0 { phase lead { system $sys; user "go"; reply 4 label first } }
        phase rest { system $sys; user filler 100; reply 4 label joined }
      }
    }""")
    assert plan.phases == ("lead", "rest")
    joined = [r for r in plan.requests if r.label == "joined"]
    assert len(joined) == 3
    for r in joined:
        assert r.expected_cached >= HEADER_TOKENS + 1000 + END_TOKENS
    assert all(r.expected_cached == 0 for r in plan.requests if r.label == "first")


def test_a_literal_prompt_shared_by_concurrent_sessions_is_an_expected_maximum():
    """Three sessions with one literal system prompt: the plan says what they could share (the
    simulator serves it when one finishes first), so `cold_ok` allows it."""
    plan = plan_of("""workload w {
      session s repeat 3 { system "You are a careful assistant who answers briefly."; user filler 300; reply 8 }
    }""")
    first = plan.requests[0]
    assert first.expected_cached == 0 and first.expected_cached_max == 3 + 12 + 1 + 3


def test_string_params_loop_variables_and_copy_are_message_parts():
    plan = plan_of("""workload w {
      params { q: string = "Why is the sky blue?" }
      session s repeat 2 {
        for topic in ["cats", "dogs"] { user $q, " About ", $topic + ".", " Copy " ; reply 4 }
        user filler 10 * ($copy + 1); reply 4 label sized
      }
    }""")
    realiser = Realiser(plan)
    firsts = [r for r in plan.requests if r.label == "reply"]
    msgs = realiser.messages(firsts[1], {})
    assert msgs[0]["content"] == "Why is the sky blue? About cats. Copy "
    assert msgs[-1]["content"] == "Why is the sky blue? About dogs. Copy "
    sized = {r.session: r.new_tokens for r in plan.requests if r.label == "sized"}
    assert sized["s#1"] - sized["s#0"] == 10


def test_named_texts_may_build_on_earlier_ones():
    plan = plan_of("""workload w {
      text a = "Rules."
      text b = $a, filler 50
      session s { system $b; user "x"; reply 4 }
    }""")
    (r,) = plan.requests
    assert Realiser(plan).messages(r, {})[0]["content"].startswith("Rules.")


@pytest.mark.parametrize("text, code, says", [
    ('text t = "x"\n session s { user "a"; reply 4 }', "WL213", "text `t` is never used"),
    ('params { t: int = 1 } text t = "x"\n session s { user $t; reply $t }', "WL202",
     "has the name of a parameter"),
    ('text a = $b\n text b = "x"\n session s { user $a; reply 4 }', "WL201",
     "`$b` is a named text"),
    ('text t = "x"\n options { k = $t }\n session s { user $t; reply 4 }', "WL201",
     "`$t` is a named text"),
    ('text t = "x"\n session s { user $t + "y"; reply 4 }', "WL301", "cannot use `+`"),
    ('session s { user 5; reply 4 }', "WL302", "must be a string, a named text"),
    ('text t = "a", filler 10 * $copy\n session s { user $t; reply 4 }', "WL201", "`$copy`"),
    ('params { copy: int = 1 }\n session s { user "x"; reply $copy }', "WL212", "built-in"),
    ('concurrency = uniform(1, 2)\n session s { user "x"; reply 4 }', "WL217", "draws"),
    ('text t = filler exponential(10)\n session s { user $t; reply 4 }', "WL217", "draws"),
    ('session s { user "x"; reply 4; wait gamma(1s, 2s) }', "WL302",
     "coefficient of variation"),
    ('session s { user "x"; reply 4; wait reading 0; user "y"; reply 4 }', "WL305",
     "reading speed"),
])
def test_misuse_is_reported_by_check(text: str, code: str, says: str):
    found = check_codes("workload w {\n " + text + "\n}")
    assert any(c == code and says in m for c, m in found), found
