"""What an LRU prefix cache of a given size would serve each planned request.

Input: the trie of the plan's prompts and the cache model's streams (`prefix.py`), each
request's generated tokens, prompt tokens and cap (its perfect-cache expectation), and the cache
(`CacheModel`: capacity C tokens in blocks of B). Output: per request the tokens the cache serves.

The cache works as the simulator's device tier does (`sim/cache.py`) and as vLLM's does: a
block is a run of B tokens identified by everything before it (so equal prefixes share
blocks); a request is served its leading blocks that are cached (at most its prompt less one
token, rounded down to a block), then its missing prompt blocks are inserted and, once it has
generated, the full blocks of what it generated (a reply the next turn does not replay still
takes room); inserting into a full cache evicts the least recently used block not in use by the
request; at its end the request's blocks are touched last to first, so a prefix's first blocks
are the most recently used and a prefix is evicted from its end. Requests are taken one at a
time (`order`): phase by phase, within a phase one request of each session in turn, trace
requests in their send order. A request is served at most its cap: what the perfect cache
promises it (an LRU cache cannot keep what was never certainly there).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

from workloadlang.plan.model import CacheModel
from workloadlang.plan.prefix import Node, Stream, Trie


def order(streams: Sequence[Stream]) -> list[int]:
    """Requests one at a time: level by level; within a level each group's k-th request
    after every group's (k-1)-th (groups in order of their first request)."""
    rank: dict[Hashable, int] = {}
    turn: dict[tuple[int, Hashable], int] = {}
    keys = []
    for i, s in enumerate(streams):
        g = rank.setdefault(s.group, len(rank))
        k = turn.get((s.level, s.group), 0)
        turn[(s.level, s.group)] = k + 1
        keys.append((s.level, k, g, i))
    return [k[3] for k in sorted(keys)]


class Blocks:
    """Block identities along trie paths: the block that ends in node n at block index k is
    `n.serial * stride + k`; generated blocks of a reply that no prompt replays are negative
    (owned by their request)."""

    def __init__(self, trie: Trie, block: int, stride: int):
        self.root, self.block, self.stride = trie.root, block, stride

    def path(self, node: Node, stop: int) -> list[int]:
        """The identities of blocks 0..stop-1 along the path to `node`."""
        nodes = []
        root = self.root
        while node is not root:
            nodes.append(node)
            node = node.parent
        out: list[int] = []
        b = self.block
        for n in reversed(nodes):
            k0, k1 = n.start // b, min(n.end // b, stop)
            if k1 > k0:
                base = n.serial * self.stride
                out.extend(range(base + k0, base + k1))
        return out

    def generated(self, i: int, s: Stream, prompt: int, generated: int) -> list[int]:
        """The full blocks a request's generated tokens complete, after its prompt's."""
        b = self.block
        k0, k1 = prompt // b, (prompt + generated) // b
        if k1 <= k0:
            return []
        if s.reply is not None:
            base = s.reply.serial * self.stride
            return list(range(base + k0, base + k1))
        base = -(i * self.stride) - 1
        return list(range(base - k0, base - k1, -1))


class Lru:
    """A device tier of `units` blocks (`sim/cache.py` at one request at a time)."""

    def __init__(self, units: int):
        self.units = units
        self.lru: OrderedDict[int, None] = OrderedDict()

    def matched(self, blocks: list[int]) -> int:
        n, lru = 0, self.lru
        for h in blocks:
            if h not in lru:
                break
            n += 1
        return n

    def insert(self, blocks: list[int], pinned: set[int], held: list[int]) -> bool:
        """Insert (or hold) each block in order; False at the first that cannot be placed."""
        lru = self.lru
        for h in blocks:
            if h not in lru:
                if not self._make_room(pinned):
                    return False
                lru[h] = None
            pinned.add(h)
            held.append(h)
        return True

    def _make_room(self, pinned: set[int]) -> bool:
        lru, skipped = self.lru, 0
        if self.units < 1:
            return False
        while len(lru) + 1 > self.units:
            if skipped >= len(lru):
                return False
            h = next(iter(lru))
            if h in pinned:
                lru.move_to_end(h)
                skipped += 1
                continue
            lru.popitem(last=False)
            skipped = 0
        return True

    def release(self, held: list[int]) -> None:
        move = self.lru.move_to_end
        for h in reversed(held):
            move(h)


def replay(trie: Trie, streams: Sequence[Stream], generated: Sequence[int],
           prompts: Sequence[int], caps: Sequence[int], cache: CacheModel) -> list[int]:
    """Output: per request (in the streams' order) the tokens the LRU cache serves it."""
    b = cache.block
    stride = max(((p + g) // b for p, g in zip(prompts, generated)), default=0) + 1
    blocks = Blocks(trie, b, stride)
    lru = Lru(cache.tokens // b)
    out = [0] * len(streams)
    for i in order(streams):
        s, prompt = streams[i], prompts[i]
        mine = blocks.path(s.prompt, prompt // b)
        hit = lru.matched(mine)
        out[i] = min(hit * b, (prompt - 1) // b * b, caps[i]) if prompt > 0 else 0
        held = mine[:hit]
        pinned = set(held)
        if lru.insert(mine[hit:], pinned, held):
            lru.insert(blocks.generated(i, s, prompt, generated[i]), pinned, held)
        lru.release(held)
    return out
