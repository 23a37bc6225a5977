"""Deterministic reply text: the reply plan (thinking / content split), seeded word streams and
the needle answer.

Input: the rendered prompt, the request's budget and thinking switch, the config.
Output: a `ReplyPlan` whose `words()` yields ("reasoning" | "content", word) pairs.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from .tokenizer import Rendered

NEEDLE_RE = re.compile(r"\[the secret code is ([A-Za-z]+-\d+)\]")
NEEDLE_WORDS = ("plover", "zirconium", "octopus", "thimble", "wombat", "kestrel")

REASONING_WORDS: tuple[str, ...] = tuple(
    """
    hmm so first consider the weighing split coins into three groups of four compare left right
    if balance then heavier lighter suspect remaining case next check again wait maybe outcome
    branch tree each leaf must identify one coin and direction count possibilities twenty four
    outcomes twenty seven enough therefore two weighings give nine fewer than needed
    """.split()
)
CONTENT_WORDS: tuple[str, ...] = tuple(
    """
    the answer is that we place four coins on each pan and keep four aside when pans balance
    counterfeit lies among remaining ones otherwise note which side went down then swap three
    coins move three aside compare again final weighing isolates coin tells whether heavier or
    lighter this works because every outcome maps to exactly one case
    """.split()
)
GARBLED_WORDS: tuple[str, ...] = tuple(
    "quux zorp blarg fnord wibble grault plugh xyzzy thud garply waldo fred".split()
)
"""Words no reply plan draws: what a corrupted context generates (`corrupt_restored`)."""
_CHUNK = 256


def reply_words(seed: int, vocab: tuple[str, ...], n: int) -> Iterator[str]:
    """`n` words drawn from `vocab` by a Random(seed), generated lazily in chunks."""
    rng = random.Random(seed)
    while n > 0:
        k = min(n, _CHUNK)
        yield from rng.choices(vocab, k=k)
        n -= k


def reply_seed(rendered: Rendered, config_seed: int) -> int:
    """A process-independent seed from the prompt: crc32 of the last message's last 4 KiB of
    text, mixed with the prompt length and the config seed."""
    tail = rendered.texts[-1][-4096:] if rendered.texts else ""
    return zlib.crc32(tail.encode("utf-8", "surrogatepass")) ^ (rendered.n * 2654435761) ^ (
        config_seed * 0x9E3779B1
    )


def wrong_code(code: str) -> str:
    """A plausible but different secret code (what a model that lost the needle says)."""
    word, _, digits = code.rpartition("-")
    lower = word.lower()
    i = NEEDLE_WORDS.index(lower) if lower in NEEDLE_WORDS else -1
    other = NEEDLE_WORDS[(i + 1) % len(NEEDLE_WORDS)]
    number = int(digits) if digits.isdigit() else 0
    return f"{other}-{1000 + (number + 4321) % 9000}"


def _asks_for_code(text: str) -> bool:
    """The message asks about the secret code: it says "secret code" outside any needle."""
    lower = text.lower()
    mentions = lower.count("secret code")
    return mentions > 0 and mentions > len(NEEDLE_RE.findall(text))


def find_needle(rendered: Rendered) -> tuple[str, int] | None:
    """The first needle in the prompt: (code, token position), or None."""
    for i, text in enumerate(rendered.texts):
        if "[the secret code is" not in text:
            continue
        m = NEEDLE_RE.search(text)
        if m:
            return m.group(1), rendered.content_offset(i) + len(text[: m.start()].split())
    return None


def needle_answer(rendered: Rendered, window: int) -> str | None:
    """The reply to a secret-code question, or None when the last user message asks none.

    Correct (`[code]`) when the needle starts within the last `window` tokens of the prompt,
    otherwise a wrong code; `[unknown-0000]` when the prompt holds no needle.
    """
    users = [i for i, r in enumerate(rendered.roles) if r == "user"]
    if not users or not _asks_for_code(rendered.texts[users[-1]]):
        return None
    found = find_needle(rendered)
    if found is None:
        return "[unknown-0000]"
    code, position = found
    inside = rendered.n - position <= window
    return f"[{code}]" if inside else f"[{wrong_code(code)}]"


@dataclass
class ReplyPlan:
    """What a request will generate: `reasoning_n` reasoning words, then either `content_n`
    seeded words or the fixed `answer` words; `finish_reason` when it runs to the end."""

    seed: int
    reasoning_n: int
    content_n: int
    answer: list = field(default_factory=list)
    finish_reason: str = "length"
    diverge_at: int | None = None  # from this word on, other words (a corrupted context)

    @property
    def total(self) -> int:
        return self.reasoning_n + (len(self.answer) if self.answer else self.content_n)

    def words(self) -> Iterator[tuple[str, str]]:
        """Yield ("reasoning", word) pairs, then ("content", word) pairs; from `diverge_at` on,
        each word is another one (`GARBLED_WORDS`)."""
        for i, pair in enumerate(self._planned()):
            if self.diverge_at is not None and i >= self.diverge_at:
                pair = (pair[0], GARBLED_WORDS[(i + self.seed) % len(GARBLED_WORDS)])
            yield pair

    def _planned(self) -> Iterator[tuple[str, str]]:
        for w in reply_words(self.seed, REASONING_WORDS, self.reasoning_n):
            yield "reasoning", w
        content = self.answer or reply_words(self.seed + 1, CONTENT_WORDS, self.content_n)
        for w in content:
            yield "content", w


def plan_reply(rendered: Rendered, budget: int, thinking: bool, think_tokens: int,
               window: int, config_seed: int) -> ReplyPlan:
    """Split the generation budget: thinking first (never on a continuation), then content.

    A secret-code question is answered with one word and finish_reason "stop".
    """
    seed = reply_seed(rendered, config_seed)
    reasoning_n = min(think_tokens, budget) if thinking and not rendered.continuation else 0
    left = budget - reasoning_n
    answer = needle_answer(rendered, window)
    if answer is not None:
        words = [answer][:left]
        return ReplyPlan(seed, reasoning_n, len(words), words, "stop" if words else "length")
    return ReplyPlan(seed, reasoning_n, left)
