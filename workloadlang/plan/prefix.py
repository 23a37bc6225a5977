"""A perfect prefix cache over planned segments, for `expected_cached`.

Input: each planned request's messages (as atoms: hashable identities with token weights).
Output: for a new request, the longest prefix (in planned tokens) it shares with what an earlier
request left in a cache that never evicts: that request's prompt, or its prompt followed by its
generated reply (when the reply is replayed).

Only requests the new one certainly follows (the last request on its conversation and the last
in its session) are candidates: across concurrent sessions the order is not planned, so sharing
there is not promised.
"""

from __future__ import annotations

from typing import Hashable, Iterable

from workloadlang.plan.model import PMessage, Seg

HEADER_TOKENS = 3  # <|im_start|> role \n
END_TOKENS = 1  # <|im_end|>
GEN_PROMPT_TOKENS = 3  # <|im_start|> assistant \n

Atom = tuple[Hashable, int]


def seg_identity(s: Seg) -> Hashable:
    if s.kind == "text":
        return ("t", s.text)
    if s.kind == "filler":
        return ("f", s.key, s.tokens, s.needle_at)
    return (s.kind[0], s.key, s.synthetic)


def atoms_of(msgs: Iterable[PMessage]) -> list[Atom]:
    """Atoms of a prompt: per message a header, its segments and an end marker, then the
    generation prompt."""
    out: list[Atom] = []
    for m in msgs:
        out.append((("h", m.role), HEADER_TOKENS))
        out.extend((seg_identity(s), s.tokens) for s in m.segs)
        out.append((("e",), END_TOKENS))
    out.append((("g",), GEN_PROMPT_TOKENS))
    return out


def message_weight(m: PMessage) -> int:
    return HEADER_TOKENS + END_TOKENS + sum(s.tokens for s in m.segs)


def common_prefix(a: list[Atom], b: list[Atom]) -> int:
    """Tokens of the longest common run of equal atoms at the start of a and b."""
    total = 0
    for (ia, wa), (ib, _) in zip(a, b):
        if ia != ib:
            break
        total += wa
    return total


class PrefixIndex:
    """What each planned request left in a perfect cache."""

    def __init__(self) -> None:
        self._left: dict[str, list[list[Atom]]] = {}

    def add(self, rid: str, atoms: list[Atom], generated: int, partial: bool) -> None:
        streams = [atoms]
        if generated:
            # The generation prompt is the replayed assistant turn's header; the reply follows.
            seg = ("p" if partial else "r", rid, False)
            streams.append(atoms[:-1] + [(("h", "assistant"), HEADER_TOKENS), (seg, generated)])
        self._left[rid] = streams

    def best(self, atoms: list[Atom], candidates: Iterable[str | None]) -> tuple[int, str | None]:
        """(expected cached tokens, the request that provides them)."""
        best, source = 0, None
        for rid in dict.fromkeys(c for c in candidates if c):
            for stream in self._left.get(rid, ()):
                n = common_prefix(atoms, stream)
                if n > best:
                    best, source = n, rid
        return best, source
