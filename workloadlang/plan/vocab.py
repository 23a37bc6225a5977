"""The filler vocabulary checked against the engine's tokenizer once: filler sized by arithmetic.

Input: `count(text) -> tokens`, the engine's tokenizer, and a salt. Output: `Vocabulary` (what
each of the 256 filler words costs in running text, a space before it, and whether the engine's
counts of filler add up word by word), and `VocabSizer`, which sizes any filler from that
table without another call.

`verify` costs a handful of calls whatever the plan: one for a short prefix, one for the 256
words together (every word one token, the usual case: done), else halving the words that cost
more until each one's cost is known; then one 2,000-word filler whose count must be what the
table adds up to (within a token): a tokenizer that merges across spaces fails that check, and
the caller then counts each filler (`ExactSizer`). Counting in running text after a prefix
leaves out what the engine adds to every text it counts (a BOS token), as a filler inside a
prompt does not have it.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import accumulate

from workloadlang.plan import synth
from workloadlang.plan.realise import ExactSizer

PREFIX = "Words:"
SAMPLE_WORDS = 2000
_DIRECT_OVER = 2.0  # words costing on average more than this: measure each word alone
_SIZED_KEPT = 4096  # filler sizes kept (a text re-sent is sized once)

Count = Callable[[str], Awaitable[int]]


@dataclass(frozen=True)
class Vocabulary:
    """`costs[i]`: the tokens filler word `synth.WORDS[i]` costs in running text (after a
    space); `sample_tokens`: the engine's count of the 2,000-word check; `calls`: tokenizer
    calls `verify` made."""

    costs: bytes
    sample_tokens: int
    calls: int

    @property
    def uniform(self) -> bool:
        """True when every word is one token: N tokens of filler are N words."""
        return self.costs == b"\x01" * len(synth.WORDS)

    def exceptions(self) -> dict[str, int]:
        """Output: the words that are not one token, with their cost (what a results file
        keeps to size the same text again)."""
        return {w: c for w, c in zip(synth.WORDS, self.costs) if c != 1}

    @classmethod
    def from_exceptions(cls, words: dict[str, int], sample_tokens: int = 0) -> Vocabulary:
        """Output: the vocabulary whose words cost 1 but those in `words`."""
        return cls(bytes(words.get(w, 1) for w in synth.WORDS), sample_tokens, 0)


async def verify(count: Count, salt: str) -> Vocabulary | None:
    """Output: the filler vocabulary as the engine counts it, or None when its counts do not
    add up word by word (see the module). Raises what `count` raises."""
    calls = [1]
    base = await count(PREFIX)

    async def cost(words: list[str] | tuple[str, ...]) -> int:
        calls[0] += 1
        return await count(PREFIX + " " + " ".join(words)) - base

    words = list(synth.WORDS)
    total = await cost(words)
    costs: dict[str, int] = {}
    if total > _DIRECT_OVER * len(words):  # most words cost more: one call each
        each = await asyncio.gather(*(cost([w]) for w in words))
        costs = dict(zip(words, each))
    else:
        await halve(words, total, cost, costs)
    if any(c < 1 for c in costs.values()):
        return None  # a word that costs nothing in running text: merged with its neighbour
    table = bytes(min(255, costs[w]) for w in synth.WORDS)
    sample = synth.stream(salt, "calibrate/sizing", SAMPLE_WORDS)
    got = await cost(synth.pick(sample))
    if abs(got - sum(sample.translate(table))) > 1:
        return None
    return Vocabulary(table, got, calls[0])


async def halve(words: list[str], total: int, cost: Callable[[list[str]], Awaitable[int]],
                out: dict[str, int]) -> None:
    """Fill `out` with the cost of each of `words`, whose costs add up to `total`: a group
    that costs one token a word is done; else its first half is counted and the second half
    costs the rest."""
    if total == len(words):
        out.update((w, 1) for w in words)
        return
    if len(words) == 1:
        out[words[0]] = total
        return
    half = len(words) // 2
    first = await cost(words[:half])
    await asyncio.gather(halve(words[:half], first, cost, out),
                         halve(words[half:], total - first, cost, out))


class VocabSizer:
    """Sizes filler by the vocabulary's table: N tokens are N words when every word is one
    token, else the number of the filler's own words whose costs add up closest to N (its
    words are known from its key). Text that is not plain filler (a needle sentence) is
    counted by `exact` (the engine's tokenizer, once per text)."""

    def __init__(self, vocab: Vocabulary, salt: str, exact: ExactSizer):
        self.vocab, self.salt, self.exact = vocab, salt, exact
        self.tokens_per_word = exact.tokens_per_word
        self._sized: OrderedDict[tuple[str, int], int] = OrderedDict()

    def words_for(self, key: str, tokens: int) -> int:
        if key in self.exact.sized:
            return self.exact.sized[key]
        if tokens <= 0:
            return 0
        if self.vocab.uniform:
            return tokens
        got = self._sized.get((key, tokens))
        if got is None:
            got = self._sized[(key, tokens)] = words_costing(
                self.vocab.costs, self.salt, key, tokens)
            if len(self._sized) > _SIZED_KEPT:
                self._sized.popitem(last=False)
        return got

    async def prepare(self, key: str, tokens: int, render: Callable[[int], str],
                      plain: bool = True) -> None:
        if not plain:
            await self.exact.prepare(key, tokens, render)


def words_costing(costs: bytes, salt: str, key: str, tokens: int) -> int:
    """Output: how many of filler `key`'s words cost closest to `tokens` by `costs` (the fewer
    words on a tie; at least one). Every word costs a token or more, so `tokens` words are
    always enough."""
    cum = list(accumulate(synth.stream(salt, key, tokens).translate(costs)))
    n = bisect_left(cum, tokens) + 1  # the fewest words that reach `tokens`
    below = cum[n - 2] if n > 1 else 0
    return n - 1 if n > 1 and tokens - below <= cum[n - 1] - tokens else n
