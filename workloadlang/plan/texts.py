"""The planner's texts: literal text as segments, long texts held once, and the named texts a
message needs, counted before they are made.

Input: the `Builder` (its named texts, `text NAME = ...`, and what was made of them so far), a
literal string, a message's parts. Output: a text segment (`literal`: a long text goes into
the plan's table of texts, `Plan.texts`, once, and the segment names it, so a 900 KB text sent
by every copy of a session is in the plan, its JSON and its hash once); the named texts to make
for one, each after the texts it reads (`needed`: no recursion, however long the chain); how
many parts (segments) a message or a named text is made of (`parts`), known before anything is
made: a text that doubles at each of 30 steps is refused by its count, not by a MemoryError.
"""

from __future__ import annotations

import math
from typing import Any

from workloadlang import ir
from workloadlang.plan.model import Seg

SHARED_CHARS = 1024
"""A literal text this long or longer is held once, in the plan's table of texts."""


def text_tokens(text: str) -> int:
    """Planned size of literal text: about 4 characters per token."""
    return max(1, math.ceil(len(text) / 4))


def literal(b: Any, text: str) -> Seg:
    """A segment of literal `text`: the text itself, or when long, its place in `b.text_table`
    (the same text, the same place)."""
    if len(text) < SHARED_CHARS:
        return Seg(kind="text", text=text, tokens=text_tokens(text))
    ref = b.text_refs.get(text)
    if ref is None:
        ref = b.text_refs[text] = len(b.text_table)
        b.text_table.append(text)
    return Seg(kind="text", ref=ref, tokens=text_tokens(text))


def reads(b: Any, name: str) -> list[str]:
    """The named texts text `name`'s parts read (`$OTHER`)."""
    return [p.value.name for p in b.declared[name].parts
            if isinstance(p, ir.ExprPart) and isinstance(p.value, ir.Ref)
            and p.value.name in b.declared]


def needed(b: Any, name: str, made: Any) -> list[str]:
    """The named texts to make for `name` that are not in `made` yet, each after every text it
    reads (`check` lets a text read only the texts declared before it: no cycle)."""
    out: list[str] = []
    seen = set()
    stack = [(name, False)]
    while stack:
        cur, ready = stack.pop()
        if ready:
            out.append(cur)
            continue
        if cur in seen or cur in made:
            continue
        seen.add(cur)
        stack.append((cur, True))
        stack.extend((r, False) for r in reversed(reads(b, cur)) if r not in made)
    return out


def named_parts(b: Any, name: str) -> int:
    """How many segments text `name` is made of (remembered in `b.text_parts`)."""
    for t in needed(b, name, b.text_parts):
        b.text_parts[t] = parts(b, b.declared[t].parts)
    return b.text_parts[name]


def parts(b: Any, items: tuple[ir.ContentPart, ...]) -> int:
    """How many segments `items` (a message's or a named text's parts) make: a named text's
    count for `$NAME` (made first: `named_parts`), one for any other part."""
    total = 0
    for p in items:
        if isinstance(p, ir.ExprPart) and isinstance(p.value, ir.Ref) \
                and p.value.name in b.declared:
            found = b.text_parts.get(p.value.name)
            total += found if found is not None else named_parts(b, p.value.name)
        else:
            total += 1
    return total
