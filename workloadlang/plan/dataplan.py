"""Text from a dataset: the items a plan's `prompt`, `answer` and `filler N from` parts take.

Input: the datasets the caller read (`workloadlang.dataset.Dataset`, by name: the planner reads
no file), the salt, and each part as the walk meets it. Output: planned segments: an item's
prompt or answer as literal text (planned at about 4 characters a token), or `filler N from`'s
text as a filler segment that carries its source words (`Seg.text`), cut to N tokens when the
run sizes it with the engine's tokenizer.

Each dataset is taken in one order per salt (a permutation drawn from the salt: the same salt,
the same prompts; a fresh salt, others), every item at most once: `prompt NAME` takes the next
item, `filler N from NAME` the next items until they hold N words (a word is at least one
token). Taking more than the dataset holds is WL421 (the dataset is too short for the plan).
`prompt NAME[i]` and `answer NAME[i]` read item i of the file's order, as often as asked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from workloadlang import ir
from workloadlang.plan import texts
from workloadlang.plan.model import DatasetInfo, Seg


class DataDraws:
    """The items of each dataset taken so far (see the module)."""

    def __init__(self, datasets: Mapping[str, Any], salt: str) -> None:
        self.datasets, self.salt = datasets, salt
        self.orders: dict[str, list[int]] = {}
        self.taken: dict[str, int] = {}  # items taken in the salted order
        self.words: dict[str, int] = {}  # words `filler N from` asked for
        self.last: dict[tuple[str, str], int] = {}  # (session, dataset) -> its last prompt's item
        self.short: set[str] = set()  # datasets found too short (said once)

    def next_item(self, name: str) -> int | None:
        """Output: the next item of `name` in the salted order, or None when none is left."""
        order = self.orders.get(name)
        if order is None:
            n = len(self.datasets[name].items)
            key = f"{self.salt}\0dataset\0{name}\0".encode()
            order = self.orders[name] = sorted(
                range(n), key=lambda i: hashlib.sha256(key + str(i).encode()).digest())
        k = self.taken.get(name, 0)
        if k >= len(order):
            return None
        self.taken[name] = k + 1
        return order[k]

    def infos(self) -> tuple[DatasetInfo, ...]:
        """Output: what the plan says of each dataset it read."""
        return tuple(DatasetInfo(name=n, path=d.path, format=d.format, sha256=d.sha256,
                                 items=len(d.items), taken=self.taken.get(n, 0),
                                 filler_words=self.words.get(n, 0))
                     for n, d in self.datasets.items())


def data_segs(b: Any, p: ir.DataPart, session: str, key: str, size: int | None,
              idx: int | None) -> tuple[Seg, ...]:
    """`p` as planned segments (see the module), for session copy `session` (`key` names a
    filler; `size`: its tokens, `idx`: the item named, both evaluated by the caller, the
    planner `b`); () with a diagnostic when it cannot be."""
    draws: DataDraws = b.data
    if p.dataset not in draws.datasets:  # its file was not read (the caller's doing)
        b.error("WL420", f"dataset `{p.dataset}` was not read", p.span,
                "plan it through `api.make_plan`, which reads the file")
        return ()
    items = draws.datasets[p.dataset].items
    if p.what == "filler":
        return filler_seg(b, p, key, size or 0)
    if idx is None and p.what == "prompt":
        idx = draws.next_item(p.dataset)
        if idx is None:
            return too_short(b, p)
    elif idx is None:
        idx = draws.last.get((session, p.dataset))
        if idx is None and p.dataset in draws.short:
            return ()  # its prompt could not be taken: said once already
        if idx is None:
            b.error("WL404", f"`answer {p.dataset}` follows no `prompt {p.dataset}` in "
                    f"{session}", p.span, f"take a prompt first, or name the item: "
                    f"`answer {p.dataset}[0]`")
            return ()
    if not 0 <= idx < len(items):
        b.error("WL421", f"dataset `{p.dataset}` holds {len(items):,} item(s): there is no "
                f"item {idx}", p.index.span if p.index is not None else p.span)
        return ()
    if p.what == "prompt":
        draws.last[(session, p.dataset)] = idx
        text = items[idx].prompt
    else:
        text = items[idx].answer
        if text is None:
            b.error("WL421", f"item {idx} of dataset `{p.dataset}` has no recorded answer",
                    p.span, "a ShareGPT conversation's answer is its first assistant turn; "
                    "JSONL gives it as `answer`, `response`, `completion` or `output`")
            return ()
    return (texts.literal(b, text),)  # a long one held once in the plan (`Plan.texts`)


def filler_seg(b: Any, p: ir.DataPart, key: str, n: int) -> tuple[Seg, ...]:
    """`filler n from NAME`: the next items' prompts and answers until they hold `n` words."""
    draws: DataDraws = b.data
    words: list[str] = []
    while len(words) < n:
        idx = draws.next_item(p.dataset)
        if idx is None:
            return too_short(b, p)
        item = draws.datasets[p.dataset].items[idx]
        words += item.prompt.split() + (item.answer or "").split()
    draws.words[p.dataset] = draws.words.get(p.dataset, 0) + n
    return (Seg(kind="filler", key=key, tokens=n, text=" ".join(words[:n])),)


def too_short(b: Any, p: ir.DataPart) -> tuple[Seg, ...]:
    """WL421, once per dataset: the plan takes more of it than it holds."""
    draws: DataDraws = b.data
    if p.dataset not in draws.short:
        draws.short.add(p.dataset)
        d = draws.datasets[p.dataset]
        b.error("WL421", f"dataset `{p.dataset}` is too short for the plan: it holds "
                f"{len(d.items):,} item(s) ({d.words:,} words), and the plan takes more (each "
                "item once)", p.span, "a larger dataset, fewer sessions or turns, or smaller "
                "fillers")
    return ()
