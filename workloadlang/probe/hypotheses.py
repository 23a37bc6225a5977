"""Hypothesis caches: what a block cache with a given eviction order and capacity would have
served each request the probe sent.

Input: the requests in the order they were sent (`Prompt`: the chain of units its prompt is made
of, each unit a run of blocks that only ever appear together, head first; the blocks its answer
left behind) and a `Hypothesis` (eviction order, which end of a sequence goes first, device and
host capacity in blocks). Output: per request the blocks it would have been served, and where
each unit is at the end (`Cache.where`).

The families are the ones engines use (docs/probe.md): LRU (vLLM, SGLang), FIFO, LFU with LRU
among equals (SGLang's `lfu`), each tail- or head-first within a sequence; a host tier that
takes what the device evicts and drops its oldest arrival, a match past the device restoring
from it. Blocks that share their unit, tier and history are one segment, so a request costs a
few operations per unit, not one per block: the probe fits capacities by simulating many
hypotheses over the same requests.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, field

POLICIES = ("lru", "fifo", "lfu")
ENDS = ("tail", "head")


@dataclass(frozen=True)
class Prompt:
    """A request as the model sees it: `units` ((key, blocks), head first: a key is the same
    text in every prompt that holds it, after the same units), `cap`: the most blocks the
    engine reports served (all but the last token), `dead`: blocks its answer left (cached,
    never matched again)."""

    units: tuple[tuple[str, int], ...]
    cap: int
    dead: int = 0
    answer: tuple[str, ...] = ()  # its answer's blocks (a greedy answer to a prompt is one)


@dataclass(frozen=True)
class Hypothesis:
    policy: str  # lru | fifo | lfu
    end: str  # tail | head: which end of a sequence is evicted first
    device: int  # blocks
    host: int = 0  # blocks


@dataclass
class Seg:
    """Blocks [start, end) of one unit with one history. `pos`: the unit's first block's place
    in its prompt (orders a request's blocks among themselves); `used`, `placed`: request
    numbers; `arrival`: on the host, when it came."""

    unit: str
    start: int
    end: int
    pos: int
    host: bool = False
    used: int = 0
    placed: int = 0
    hits: int = 1
    arrival: int = 0
    pinned: bool = False
    serial: int = 0  # its place in the cache's heaps
    version: int = 0  # heap entries of an older version are stale
    gone: bool = False  # no longer in the cache

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class Cache:
    """One hypothesis, run request by request (`serve`)."""

    hyp: Hypothesis
    segs: dict[str, list[Seg]] = field(default_factory=dict)  # per unit, by start
    device_used: int = 0
    host_used: int = 0
    now: int = 0
    arrivals: int = 0
    restored: int = 0  # blocks the last request's match restored from the host
    heap: list = field(default_factory=list)  # (eviction key, version, serial, seg)
    host_heap: list = field(default_factory=list)  # (arrival order, version, serial, seg)
    serials: int = 0

    # ---------------------------------------------------------------- a request

    def serve(self, prompt: Prompt) -> int:
        """Serve one request: match (restoring from the host), insert the rest and the answer's
        blocks, release. Output: the blocks the engine would report served."""
        self.now += 1
        self.restored = 0
        matched, pos, broken = 0, 0, False
        held: list[Seg] = []
        for key, blocks in prompt.units:
            got = 0 if broken else self._match(key, blocks, pos, held)
            matched += got
            broken = broken or got < blocks
            pos += blocks
        restored = self.restored  # what the match restored (the rest is placed again)
        self._fill(prompt.units, held)
        if prompt.answer:
            self._fill(tuple((key, 1) for key in prompt.answer), held, pos)
        for s in held:
            s.pinned = False
        for unit in dict.fromkeys(s.unit for s in held):
            self._coalesce(unit)
        for s in held:
            if not s.gone and not s.host:
                self._push(s)
        self.restored = restored
        return min(matched, prompt.cap)

    def _coalesce(self, unit: str) -> None:
        """Join the unit's adjacent device segments that share their history (those one
        request restored or placed block by block): a block-by-block eviction or restore would
        otherwise leave a segment per block, and every lookup in the unit would scan them all.
        A joined segment is evicted, moved and restored as its parts would be, in the same
        order (its blocks' eviction keys are consecutive, and nothing falls between them)."""
        segs = self.segs.get(unit)
        if not segs or len(segs) < 2:
            return
        kept: list[Seg] = []
        joined: list[Seg] = []
        for s in segs:
            last = kept[-1] if kept else None
            if (last is not None and not s.host and not last.host and last.end == s.start
                    and (last.pos, last.used, last.placed, last.hits)
                    == (s.pos, s.used, s.placed, s.hits)):
                last.end = s.end
                s.gone = True
                if not joined or joined[-1] is not last:
                    joined.append(last)
            else:
                kept.append(s)
        if len(kept) < len(segs):
            self.segs[unit] = kept
            for s in joined:
                self._push(s)

    def _match(self, key: str, blocks: int, pos: int, held: list) -> int:
        """The unit's leading present blocks (a host one restored), pinned. Output: how many."""
        have = 0
        while have < blocks:
            s = self._at(key, have)
            if s is None or s.start != have:
                break
            self._take(s, held, blocks)
            have = s.end
        return min(have, blocks)

    def _at(self, key: str, block: int) -> Seg | None:
        """The unit's segment that holds `block`, else the first one after it (None when
        there is none). The unit's segments never overlap, and head-first eviction only moves
        a segment's start towards its end, so they stay in order of their starts."""
        segs = self.segs.get(key, ())
        i = bisect_right(segs, block, key=_start)
        if i and segs[i - 1].end > block:
            return segs[i - 1]
        return segs[i] if i < len(segs) else None

    def _split(self, s: Seg, at: int) -> None:
        """Cut `s` at block `at` (when inside it): the blocks from `at` on keep its history."""
        if s.start < at < s.end:
            rest = Seg(s.unit, at, s.end, s.pos, s.host, s.used, s.placed, s.hits, s.arrival,
                       s.pinned)
            s.end = at
            self._add(rest)
            self._push(s)

    def _take(self, s: Seg, held: list, upto: int | None = None) -> None:
        """A request uses segment `s` (up to block `upto`; restored first when it is on the
        host): a hit, pinned."""
        if upto is not None:
            self._split(s, upto)
        if s.host:
            self._restore(s)
        s.used = self.now
        s.hits += 1
        s.pinned = True
        held.append(s)

    def _restore(self, s: Seg) -> None:
        self.restored += s.size
        self.host_used -= s.size
        s.host, s.placed = False, self.now
        s.pinned = True
        self._room(s.size)
        self.device_used += s.size

    def _fill(self, units, held: list, pos: int = 0) -> None:
        """Cache the blocks of `units` the match did not reach, as the engine inserts a prompt:
        what is on the device is pinned first, then in order what is on the host comes back
        and what is nowhere is placed (as one new segment per gap; fewer blocks when the device
        is full of pinned ones)."""
        for key, blocks in units:
            for s in list(self.segs.get(key, ())):
                if not s.pinned and not s.host and s.start < blocks:
                    self._take(s, held, blocks)
        i = 0
        while i < len(units):
            j, fresh = i, set()  # a key twice in a row is placed once, as `_insert` does
            while j < len(units) and units[j][0] not in fresh and not self.segs.get(units[j][0]):
                fresh.add(units[j][0])
                j += 1
            if j > i:  # units with no block anywhere: room for all of them at once
                pos = self._place(units[i:j], pos, held)
                i = j
                continue
            key, blocks = units[i]
            self._insert(key, blocks, pos, held)
            pos += blocks
            i += 1

    def _place(self, units, pos: int, held: list) -> int:
        """Place units no block of which is cached (an answer's blocks), head first, in the
        room one eviction makes for them all: the victims go in the order that evicting for
        each in turn takes them (the blocks placed are pinned, never victims), and the host
        sees them arrive in that order, so only the number of steps changes. Output: the
        position after them."""
        room = self._room(sum(blocks for _, blocks in units))
        for key, blocks in units:
            n = min(blocks, room)
            if n > 0:
                self._new(key, 0, n, pos, held)
                room -= n
            pos += blocks
        return pos

    def _new(self, key: str, start: int, n: int, pos: int, held: list) -> None:
        """Place `n` blocks of unit `key` from block `start` on the device, new and pinned
        (the room is already made)."""
        s = Seg(key, start, start + n, pos, used=self.now, placed=self.now, pinned=True)
        self._add(s)
        self.device_used += n
        held.append(s)

    def _insert(self, key: str, blocks: int, pos: int, held: list) -> None:
        at = 0
        while at < blocks:
            s = self._at(key, at)
            if s is not None and s.start <= at:
                if s.host and not s.pinned:
                    self._take(s, held, blocks)
                at = s.end
                continue
            upto = min(s.start, blocks) if s is not None else blocks
            room = self._room(upto - at)
            if room <= 0:
                return
            self._new(key, at, room, pos, held)
            at += room

    # ---------------------------------------------------------------- eviction

    def _room(self, want: int) -> int:
        """Evict unpinned device blocks until `want` fit (or none is left to evict). Output:
        how many of `want` fit."""
        free = self.hyp.device - self.device_used
        while free < want:
            victim = self._victim()
            if victim is None:
                break
            free += self._evict(victim, want - free)
        return max(0, min(want, free))

    def _victim(self) -> Seg | None:
        """The unpinned device segment the hypothesis evicts next (stale heap entries, and
        pinned segments, which are pushed again when released, are dropped on the way)."""
        heap = self.heap
        while heap:
            _, version, _, s = heap[0]
            if s.gone or s.host or s.pinned or s.version != version:
                heapq.heappop(heap)
                continue
            return s
        return None

    def _add(self, s: Seg) -> None:
        self.serials += 1
        s.serial = self.serials
        insort(self.segs.setdefault(s.unit, []), s, key=_start)
        self._push(s)

    def _push(self, s: Seg) -> None:
        """A segment's key changed (or it is new): its entry in its tier's heap."""
        s.version += 1
        if s.host:
            heapq.heappush(self.host_heap, ((s.arrival, self._within(s)), s.version, s.serial, s))
        elif not s.pinned:
            heapq.heappush(self.heap, (self._key(s), s.version, s.serial, s))

    def _remove(self, s: Seg) -> None:
        segs = self.segs[s.unit]
        i = bisect_left(segs, s.start, key=_start)
        assert segs[i] is s, "a unit's segments are kept in order of their starts"
        del segs[i]
        s.gone = True

    def _within(self, s: Seg) -> int:
        """Where a segment's first victim block lies in a request's order (the tail's first)."""
        tail = self.hyp.end == "tail"
        edge = s.pos + (s.end - 1 if tail else s.start)
        return -edge if tail else edge

    def _key(self, s: Seg) -> tuple:
        """The eviction order of a segment's first victim block (smallest goes first)."""
        within = self._within(s)
        if self.hyp.policy == "fifo":
            return (s.placed, within)
        if self.hyp.policy == "lfu":
            return (s.hits, s.used, within)
        return (s.used, within)

    def _evict(self, s: Seg, need: int) -> int:
        """Move up to `need` blocks from the victim end of `s` to the host. Output: moved."""
        k = min(need, s.size)
        tail = self.hyp.end == "tail"
        a, b = (s.end - k, s.end) if tail else (s.start, s.start + k)
        if k == s.size:
            self._remove(s)
        else:
            if tail:
                s.end -= k
            else:
                s.start += k
            self._push(s)
        self.device_used -= k
        self._to_host(Seg(s.unit, a, b, s.pos, host=True, used=s.used, placed=s.placed,
                          hits=s.hits))
        return k

    def _to_host(self, s: Seg) -> None:
        if self.hyp.host <= 0:
            self._forget(s.unit)
            return
        self.arrivals += 1
        s.arrival = self.arrivals
        while self.host_used + s.size > self.hyp.host:
            old = self._oldest_host()
            if old is None:
                break
            self._drop_host(old, self.host_used + s.size - self.hyp.host)
        room = self.hyp.host - self.host_used
        if room < s.size:  # of blocks evicted together, the last ones to arrive stay
            if self.hyp.end == "tail":
                s.end = s.start + max(0, room)
            else:
                s.start = s.end - max(0, room)
        if s.size > 0:
            self._add(s)
            self.host_used += s.size
        self._forget(s.unit)

    def _oldest_host(self) -> Seg | None:
        heap = self.host_heap
        while heap:
            _, version, _, s = heap[0]
            if s.gone or not s.host or s.version != version:
                heapq.heappop(heap)
                continue
            return s
        return None

    def _drop_host(self, s: Seg, need: int) -> None:
        """Drop up to `need` blocks of host segment `s`, first arrived first (its victim end)."""
        k = min(need, s.size)
        if k == s.size:
            self._remove(s)
        else:
            if self.hyp.end == "tail":
                s.end -= k
            else:
                s.start += k
            self._push(s)
        self.host_used -= k
        self._forget(s.unit)

    def _forget(self, unit: str) -> None:
        if not self.segs.get(unit, True):
            del self.segs[unit]

    # ---------------------------------------------------------------- where things are

    def where(self, key: str, blocks: int) -> tuple[int, int]:
        """Of the unit's leading blocks that a match would reach: (on the device, on the host)."""
        dev = host = have = 0
        for s in self.segs.get(key, ()):
            if s.start != have or have >= blocks:
                break
            dev, host = (dev, host + s.size) if s.host else (dev + s.size, host)
            have = s.end
        return dev, host


def _start(s: Seg) -> int:
    return s.start


def replay(hyp: Hypothesis, prompts: list[Prompt]) -> tuple[list[int], Cache]:
    """Serve every prompt in order under `hyp`. Output: the blocks served to each, the cache."""
    cache = Cache(hyp)
    return [cache.serve(p) for p in prompts], cache


def eviction_order(cache: Cache, keys: Iterable[str]) -> list[str]:
    """Of the units `keys` that have blocks on the device, the order `cache`'s hypothesis would
    evict them in (by each one's first victim block), first to go first."""
    ranked = []
    for key in keys:
        segs = [s for s in cache.segs.get(key, ()) if not s.host]
        if segs:
            ranked.append((min(cache._key(s) for s in segs), key))
    return [key for _, key in sorted(ranked)]
