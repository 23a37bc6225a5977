"""The words a selector reads as its own: a label or phase of that name used bare says so, and
docs/language.md lists every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.checkhelp import check_codes
from workloadlang.diagnostics import WorkloadError
from workloadlang.parse import parse
from workloadlang.selector import FLAGS

LANGUAGE_MD = (Path(__file__).parents[2] / "docs" / "language.md").read_text(encoding="utf-8")
KEYWORDS = ["first", "last", "label", "phase", "session"]

W = """workload w {
  session s { user "hi"; reply 4 label %s; user "more"; reply 4 label again }
  gates { a: overall count(ok{%s}) >= 1 }
}
"""


@pytest.mark.parametrize("word", KEYWORDS)
@pytest.mark.parametrize("where", ["{0}", "again, {0}", "{0}, again"])
def test_a_label_named_like_a_selector_keyword_is_told_it_is_a_keyword(word: str, where: str):
    with pytest.raises(WorkloadError) as e:
        parse(W % (word, where.format(word)), "w.wl")
    (d,) = e.value.diagnostics
    assert d.code == "WL101"
    assert d.message.startswith(f"`{word}` is a selector keyword")
    assert f"`label={word}`" in d.hint


@pytest.mark.parametrize("word", KEYWORDS)
def test_the_keyed_form_selects_such_a_label(word: str):
    assert check_codes(W % (word, f"label={word}")) == []


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_bare_flag_that_is_also_a_label_warns(flag: str):
    assert [c for c, _ in check_codes(W % (flag, flag))] == ["WL235"]
    assert check_codes(W % (flag, f"label={flag}")) == []


def test_a_misplaced_label_keyword_elsewhere_is_a_plain_syntax_error():
    with pytest.raises(WorkloadError) as e:
        parse('workload w { session s { user "a"; reply 4 label } }', "w.wl")
    assert e.value.diagnostics[0].message == "unexpected `}`; expected a name"


def test_the_docs_list_every_word_a_bare_label_cannot_be():
    i = LANGUAGE_MD.index("A bare name in a selector is a label or phase unless")
    listed = set(re.findall(r"`([a-z]+)`", LANGUAGE_MD[i:LANGUAGE_MD.index("Metrics, per", i)]))
    assert set(KEYWORDS) | FLAGS <= listed
