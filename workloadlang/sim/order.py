"""The device tier's eviction orders: which unpinned block goes first.

Input: the blocks a request placed and touched, in the order the request held them. Output: the
next victim. Three policies, each with the within-sequence order as its touch order:

* `LruOrder`: the least recently used block first (vLLM, SGLang's default). A request's blocks
  are touched tail-first (`evict_first="tail"`: the head is used last, so a partly evicted
  prefix keeps its head) or head-first (the tail is used last: the head goes first, and the
  rest of the prefix cannot be matched any more).
* `FifoOrder`: the block placed first goes first; a hit does not move it. A request's new
  blocks are ordered among themselves tail- or head-first the same way.
* `LfuOrder`: the block with the fewest hits goes first, the least recently used among equals
  (SGLang's `--radix-eviction-policy lfu`). Every match of a block counts one hit; a block
  placed anew starts at one; the count stays with a block moved to the host and back.

Every order keeps an `OrderedDict` of the device blocks, front first, for the LRU and FIFO
orders that is the eviction order itself (bulk C-level moves: a 10k-block prefix costs no Python
loop per block); the LFU order keeps a heap of (hits, last use, block) beside it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable


class LruOrder:
    """Least recently used first (see the module)."""

    needs_fresh = False  # `released` reads which blocks the request placed itself

    def __init__(self, tail_first: bool = True) -> None:
        self.tail_first = tail_first
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def placed(self, h: int) -> None:
        """Block `h` is new on the device."""
        self.blocks[h] = None

    def hit(self, hashes: Iterable[int]) -> None:
        """`hashes` were matched (a hit each)."""

    def released(self, hashes: list, fresh: set) -> None:
        """A request gave back `hashes` (its prefix, head first); `fresh`: those it placed."""
        order = reversed(hashes) if self.tail_first else iter(hashes)
        deque(map(self.blocks.move_to_end, order), maxlen=0)

    def forget(self, h: int) -> None:
        self.blocks.pop(h, None)

    def victim(self, pinned: Callable[[int], bool]) -> int | None:
        """The next unpinned block to evict (pinned ones are moved behind), None when all are."""
        blocks = self.blocks
        for _ in range(len(blocks)):
            h = next(iter(blocks))
            if not pinned(h):
                return h
            blocks.move_to_end(h)
        return None

    def __iter__(self):
        return iter(self.blocks)


class FifoOrder(LruOrder):
    """First placed first (see the module): only a request's own new blocks are reordered."""

    needs_fresh = True

    def released(self, hashes: list, fresh: set) -> None:
        new = [h for h in hashes if h in fresh]
        super().released(new, fresh)

    def victim(self, pinned: Callable[[int], bool]) -> int | None:
        """The first placed unpinned block; pinned ones keep their place (a skip does not make
        a block younger)."""
        return next((h for h in self.blocks if not pinned(h)), None)


class LfuOrder(LruOrder):
    """Fewest hits first, least recently used among equals (see the module)."""

    def __init__(self, tail_first: bool = True) -> None:
        super().__init__(tail_first)
        self.hits: dict[int, int] = {}  # every block of either tier -> its hits
        self.used: dict[int, int] = {}  # device block -> the last use's sequence number
        self.heap: list[tuple[int, int, int]] = []
        self.clock = 0

    def placed(self, h: int) -> None:
        super().placed(h)
        self.hits[h] = self.hits.get(h, 0) + 1
        self._use(h)

    def hit(self, hashes: Iterable[int]) -> None:
        for h in hashes:
            self.hits[h] = self.hits.get(h, 0) + 1

    def released(self, hashes: list, fresh: set) -> None:
        for h in (reversed(hashes) if self.tail_first else hashes):
            if h in self.blocks:
                self._use(h)

    def _use(self, h: int) -> None:
        self.clock += 1
        self.used[h] = self.clock
        heapq.heappush(self.heap, (self.hits.get(h, 1), self.clock, h))
        if len(self.heap) > 4 * len(self.blocks) + 64:
            self.heap = [(self.hits.get(b, 1), self.used[b], b) for b in self.blocks]
            heapq.heapify(self.heap)

    def forget(self, h: int) -> None:
        super().forget(h)
        self.used.pop(h, None)

    def drop(self, h: int) -> None:
        """Block `h` left both tiers: its hits are forgotten."""
        self.hits.pop(h, None)

    def victim(self, pinned: Callable[[int], bool]) -> int | None:
        """The unpinned block with the fewest hits; a pinned one's entry is dropped on the way
        (its release, which every pin ends in, gives it a new one)."""
        heap = self.heap
        while heap:
            hits, used, h = heap[0]
            if h not in self.blocks or self.used.get(h) != used or self.hits.get(h, 1) != hits \
                    or pinned(h):
                heapq.heappop(heap)  # stale (the block moved since) or held for now
                continue
            return h  # it stays in the heap until it is forgotten
        return None


ORDERS = {"lru": LruOrder, "fifo": FifoOrder, "lfu": LfuOrder}
"""Eviction policy name -> its order (`SimConfig.eviction`)."""
