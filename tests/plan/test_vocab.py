"""The filler vocabulary checked against a tokenizer once, and filler sized by arithmetic.

Input: fake tokenizers whose counts are known exactly (a word a token, some words dearer, a BOS
token, one that merges across spaces) and the committed Mooncake slice. Output checked: the
words' costs found with a few calls, filler sized to its planned tokens as the tokenizer counts
it, the fallback when counts do not add up, and a trace's sizing without a call per piece (the
tokenizer used to be asked once or more for each of a record's blocks).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workloadlang import api
from workloadlang.plan import synth
from workloadlang.plan.realise import ExactSizer, Realiser
from workloadlang.plan.vocab import VocabSizer, Vocabulary, verify, words_costing
from workloadlang.run import calibrate

SLICE = Path(__file__).parents[1] / "data" / "mooncake" / "conversation_1000.jsonl"
DEAR = {"government": 2, "mountain": 3, "thunder": 2, "harbor": 2, "velvet": 4}


class FakeTokenizer:
    """Counts `text` as BOS + each space-separated word's cost (`dear`, else 1); `merge`:
    every pair of words one token (a tokenizer that merges across spaces)."""

    def __init__(self, dear: dict[str, int] | None = None, bos: int = 1, merge: bool = False):
        self.dear, self.bos, self.merge = dear or {}, bos, merge
        self.calls = 0

    async def count(self, text: str) -> int:
        self.calls += 1
        words = text.split()
        if self.merge:
            return self.bos + (len(words) + 1) // 2
        return self.bos + sum(self.dear.get(w, 1) for w in words)

    def filler_tokens(self, text: str) -> int:
        """What a filler costs inside a prompt (no BOS there)."""
        return sum(self.dear.get(w, 1) for w in text.split())


def test_a_word_a_token_is_checked_in_a_few_calls_and_sized_by_arithmetic():
    tok = FakeTokenizer()
    vocab = asyncio.run(verify(tok.count, "s"))
    assert vocab is not None and vocab.uniform and vocab.exceptions() == {}
    assert tok.calls == vocab.calls <= 4
    sizer = VocabSizer(vocab, "s", ExactSizer(tok.count))
    assert [sizer.words_for(f"k{i}", n) for i, n in enumerate((1, 7, 512, 12_000))] == \
        [1, 7, 512, 12_000]
    assert tok.calls == vocab.calls  # sizing asked nothing more


def test_dear_words_are_found_by_halving_and_filler_lands_on_its_tokens():
    tok = FakeTokenizer(DEAR, bos=1)
    vocab = asyncio.run(verify(tok.count, "salt"))
    assert vocab is not None and vocab.exceptions() == DEAR
    assert vocab.calls < 2 * len(DEAR) * 9 + 6  # halving: far fewer than a call per word
    sizer = VocabSizer(vocab, "salt", ExactSizer(tok.count))
    calls = tok.calls
    for key, tokens in [("a", 1), ("b", 50), ("c", 511), ("d", 4096), ("main#0:0/1", 20_000)]:
        text = synth.filler("salt", key, sizer.words_for(key, tokens))
        assert abs(tok.filler_tokens(text) - tokens) <= max(DEAR.values()) // 2
    assert tok.calls == calls


def test_words_costing_picks_the_closest_count_and_the_fewer_words_on_a_tie():
    costs = bytes([2] * 256)  # every word two tokens
    assert words_costing(costs, "s", "k", 10) == 5
    assert words_costing(costs, "s", "k", 11) == 5  # 10 or 12: a tie, the fewer words
    assert words_costing(costs, "s", "k", 1) == 1  # at least one word


def test_a_tokenizer_that_merges_across_spaces_is_not_trusted():
    assert asyncio.run(verify(FakeTokenizer(merge=True).count, "s")) is None


def test_calibration_falls_back_to_counting_each_filler_and_says_so():
    class Tok(FakeTokenizer):
        pass

    cal = calibrate.Calibration()
    sizer = asyncio.run(calibrate.sizer_for(None, None, Tok(merge=True), "s", cal))
    assert type(sizer) is ExactSizer and cal.sizing == "tokenizer" and cal.vocabulary is None
    assert any("word by word" in n for n in cal.notes)


def test_a_shard_makes_the_same_sizer_from_the_calibration_alone():
    tok = FakeTokenizer(DEAR)
    cal = calibrate.Calibration()
    sizer = asyncio.run(calibrate.sizer_for(None, None, tok, "s", cal))
    assert cal.sizing == "vocabulary" and cal.vocabulary == DEAR and cal.tokenizer_calls > 0
    again = calibrate.sizer_of(calibrate.Calibration.model_validate(cal.model_dump()),
                               FakeTokenizer(DEAR), "s")
    assert [again.words_for(k, 3000) for k in "abc"] == [sizer.words_for(k, 3000) for k in "abc"]
    assert Vocabulary.from_exceptions(DEAR).exceptions() == DEAR


def trace_plan(limit: int):
    source = api.load("mooncake")
    return api.make_plan(api.parse_checked(source), source,
                         {"trace": str(SLICE), "limit": str(limit)}, salt="vocab")


@pytest.mark.parametrize("dear", [{}, DEAR])
def test_sizing_a_trace_asks_the_tokenizer_nothing_per_record(dear):
    """60 Mooncake records once took 1,460 tokenizer calls (24 a record); now the calibration's
    few are all."""
    plan = trace_plan(60)
    tok = FakeTokenizer(dear)
    cal = calibrate.Calibration()
    sizer = asyncio.run(calibrate.sizer_for(None, None, tok, plan.salt, cal))
    before = tok.calls
    realiser = Realiser(plan, sizer)

    async def size_all():
        for req in plan.requests:
            await realiser.prepare(req)

    asyncio.run(size_all())
    assert tok.calls == before <= (6 if not dear else 120)
    for req in plan.requests[:5]:  # and the text is the planned size, as the tokenizer counts
        text = realiser.messages(req, {})[0]["content"]
        planned = req.prompt_tokens - 7  # the chat template's planned tokens
        assert abs(tok.filler_tokens(text) - planned) <= len(text.split()) // 500 + 24


def test_a_needle_is_still_counted_by_the_tokenizer():
    tok = FakeTokenizer()
    vocab = asyncio.run(verify(tok.count, "s"))
    sizer = VocabSizer(vocab, "s", ExactSizer(tok.count))
    calls = tok.calls

    def render(n: int) -> str:
        return synth.filler("s", "n", n) + " [the secret code is kestrel-1234]"

    asyncio.run(sizer.prepare("n", 100, render, plain=False))
    assert tok.calls > calls and sizer.words_for("n", 100) == sizer.exact.sized["n"]
