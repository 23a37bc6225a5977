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
from collections.abc import Hashable, Sequence

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


Run = tuple[Hashable, int]  # (a node's serial, or ("gen", request)) and its full blocks


def path_runs(node: Node, root: Node, block: int) -> list[Run]:
    """The full blocks along the path to `node`, as runs: per node, the blocks whose last
    token is in it (a node's blocks are always used together: every path through it holds
    them all)."""
    nodes = []
    while node is not root:
        nodes.append(node)
        node = node.parent or root  # below the root a node has a parent
    out: list[Run] = []
    for n in reversed(nodes):
        k = n.end // block - n.start // block
        if k:
            out.append((n.serial, k))
    return out


def generated_run(i: int, s: Stream, prompt: int, generated: int, block: int) -> Run | None:
    """The full blocks a request's generated tokens complete after its prompt's: in its reply's
    node when a later prompt replays it, else its own."""
    k = (prompt + generated) // block - prompt // block
    if k <= 0:
        return None
    return (s.reply.serial if s.reply is not None else ("gen", i)), k


class Lru:
    """The device tier of `sim/cache.py` with `units` blocks, one request at a time, kept per
    run of blocks: `lru` maps a run's key to how many of its blocks are cached (its first
    ones), least recently used first.

    The simulator touches a request's blocks last to first when it ends, so a run's blocks
    stay together in its LRU order, its last ones the least recent: evicting blocks from the
    least recent run takes its last blocks first, and a run's cached blocks are always its
    first ones. Blocks in use by the request (its runs) are never evicted for it."""

    def __init__(self, units: int):
        self.units = units
        self.used = 0
        self.lru: OrderedDict[Hashable, int] = OrderedDict()

    def matched(self, runs: list[Run]) -> int:
        """Blocks of `runs` cached from the first on."""
        n, lru = 0, self.lru
        for key, k in runs:
            have = lru.get(key, 0)
            n += have
            if have < k:
                break
        return n

    def serve(self, prompt: list[Run], gen: Run | None) -> None:
        """Insert a request's missing prompt blocks, then (when they all fit) its generated
        blocks; then touch them all, last to first."""
        pinned = {key for key, _ in prompt}
        if gen is not None:
            pinned.add(gen[0])
        if self._insert(prompt, pinned) and gen is not None:
            self._insert([gen], pinned)
        move = self.lru.move_to_end
        for key in ([gen[0]] if gen is not None and gen[0] in self.lru else []):
            move(key)
        for key, _ in reversed(prompt):
            if key in self.lru:
                move(key)

    def _insert(self, runs: list[Run], pinned: set) -> bool:
        """Make each run fully cached, in order; False when room ran out (the simulator stops
        at the first block it cannot place)."""
        lru = self.lru
        missing = sum(k - lru.get(key, 0) for key, k in runs)
        room = self.units - self.used
        if missing > room:
            room += self._evict(missing - room, pinned)
        for key, k in runs:
            have = lru.get(key, 0)
            add = min(k - have, room)
            if add > 0:
                lru[key] = have + add
                self.used += add
                room -= add
            if have + add < k:
                return False
        return True

    def _evict(self, need: int, pinned: set) -> int:
        """Free up to `need` blocks from the least recently used runs not in use. Output:
        blocks freed."""
        lru, freed, gone = self.lru, 0, []
        for key, have in lru.items():
            if key in pinned:
                continue
            take = min(have, need - freed)
            freed += take
            if take == have:
                gone.append(key)
            else:
                lru[key] = have - take
            if freed == need:
                break
        for key in gone:
            del lru[key]
        self.used -= freed
        return freed


def replay(trie: Trie, streams: Sequence[Stream], generated: Sequence[int],
           prompts: Sequence[int], caps: Sequence[int], cache: CacheModel) -> list[int]:
    """Output: per request (in the streams' order) the tokens the LRU cache serves it."""
    b = cache.block
    lru = Lru(cache.tokens // b)
    out = [0] * len(streams)
    for i in order(streams):
        s, prompt = streams[i], prompts[i]
        runs = path_runs(s.prompt, trie.root, b)
        hit = lru.matched(runs)
        out[i] = min(hit * b, (prompt - 1) // b * b, caps[i]) if prompt > 0 else 0
        lru.serve(runs, generated_run(i, s, prompt, generated[i], b))
    return out
