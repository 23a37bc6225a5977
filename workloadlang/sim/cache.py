"""The block-hashed prefix cache: a device tier with an eviction order and pinning, an optional
host tier that receives evicted blocks and restores them on a hit, and an optional idle
lifetime.

Input: chained block hashes (see `tokenizer.chain_hashes`). Output: match results (how many
leading blocks hit, how many came back from the host), and counters for /metrics.

Capacity is counted in units of one block; a block inserted under the `duplicate_blocks` fault
costs two units. Pinned blocks (held by active requests) are never evicted: eviction skips them.
Which unpinned block goes first is the device order's (`order.py`: LRU, FIFO or LFU, each
tail- or head-first within a sequence). The host tier drops its oldest arrival when full.

With an idle lifetime, a block neither matched nor placed for that long is dropped from
either tier (when a request looks the cache up or makes room).

Pin counts are two `Counter`s (pins in, pins out) so that pinning and unpinning a 10k-block
prefix are C-level bulk updates rather than a Python loop per block.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import takewhile

from .order import ORDERS


@dataclass
class Match:
    """Result of `PrefixCache.match`: leading blocks found (device + host), restored blocks,
    and the hashes pinned for the caller (release them with `PrefixCache.release`)."""

    blocks: int
    restored: int
    pinned: list


@dataclass
class CacheCounters:
    """Monotonic cache counters, in blocks."""

    evicted: int = 0
    host_dropped: int = 0
    restored: int = 0
    dropped: int = 0
    inserted: int = 0
    rejected: int = 0
    expired: int = 0


class PrefixCache:
    """Device + host prefix cache over block hashes; all methods are synchronous.

    `eviction`: "lru", "fifo" or "lfu"; `tail_first`: within a sequence, the tail goes before
    the head; `idle_ttl_s`: a block unused for longer is dropped (0: never); `clock`: seconds.
    """

    def __init__(self, block_size: int, device_tokens: int, host_tokens: int = 0, *,
                 eviction: str = "lru", tail_first: bool = True, idle_ttl_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.block_size = block_size
        self.device_units = device_tokens // block_size
        self.host_units = host_tokens // block_size
        self.resident: dict[int, int] = {}  # device hash -> units
        self.order = ORDERS[eviction](tail_first)
        self._pins_in: Counter = Counter()  # device hash -> times pinned
        self._pins_out: Counter = Counter()  # device hash -> times released
        self.host: OrderedDict[int, int] = OrderedDict()  # host hash -> units, oldest first
        self.used_units = 0
        self.host_used_units = 0
        self.counters = CacheCounters()
        self.placements = 0  # blocks placed on the device so far (a request's `since`)
        self._born: dict[int, int] = {}  # device hash -> its placement's number
        self.idle_ttl_s, self.clock = idle_ttl_s, clock
        self._used_at: dict[int, float] = {}  # hash -> last match or placement (with a TTL)

    @property
    def lru(self):
        """The device blocks in eviction order, next victim first (LRU and FIFO orders)."""
        return self.order.blocks

    # ------------------------------------------------------------------ state

    @property
    def used_tokens(self) -> int:
        """Device capacity in use, in tokens (duplicated blocks count twice)."""
        return self.used_units * self.block_size

    @property
    def host_used_tokens(self) -> int:
        return self.host_used_units * self.block_size

    def pinned(self, h: int) -> bool:
        """True while some active request holds block `h`."""
        return self._pins_in.get(h, 0) > self._pins_out.get(h, 0)

    @property
    def pinned_blocks(self) -> int:
        out = self._pins_out
        return sum(1 for h, n in self._pins_in.items() if n > out.get(h, 0))

    def snapshot(self) -> dict:
        """A JSON-ready view of the cache's occupancy and counters."""
        return {
            "block_size": self.block_size,
            "used_tokens": self.used_tokens,
            "capacity_tokens": self.device_units * self.block_size,
            "blocks": len(self.resident),
            "pinned_blocks": self.pinned_blocks,
            "host_used_tokens": self.host_used_tokens,
            "host_capacity_tokens": self.host_units * self.block_size,
            "host_blocks": len(self.host),
            "counters": vars(self.counters).copy(),
        }

    def contains(self, h: int) -> str | None:
        """'device', 'host' or None: where block `h` lives."""
        if h in self.resident:
            return "device"
        return "host" if h in self.host else None

    # ------------------------------------------------------------------ eviction

    def _forget(self, h: int) -> int:
        """Remove device block `h` (must be unpinned); return its units."""
        self._pins_in.pop(h, None)
        self._pins_out.pop(h, None)
        self._born.pop(h, None)
        self.order.forget(h)
        units = self.resident.pop(h)
        self.used_units -= units
        return units

    def _gone(self, h: int) -> None:
        """Block `h` left both tiers."""
        self._used_at.pop(h, None)
        drop = getattr(self.order, "drop", None)
        if drop is not None:
            drop(h)

    def _host_pop(self, h: int) -> int | None:
        units = self.host.pop(h, None)
        if units is not None:
            self.host_used_units -= units
        return units

    def _to_host(self, h: int, units: int) -> None:
        if self.host_units <= 0:
            self._gone(h)
            return
        while self.host and self.host_used_units + units > self.host_units:
            old, u = self.host.popitem(last=False)
            self.host_used_units -= u
            self.counters.host_dropped += 1
            self._gone(old)
        if self.host_used_units + units <= self.host_units:
            self.host[h] = units
            self.host_used_units += units
        else:
            self._gone(h)

    def _make_room(self, units: int) -> bool:
        """Evict unpinned device blocks in the order's turn (to the host tier) until `units`
        fit."""
        if units > self.device_units:
            return False
        while self.used_units + units > self.device_units:
            h = self.order.victim(self.pinned)
            if h is None:
                return False  # every resident block is pinned
            self._to_host(h, self._forget(h))
            self.counters.evicted += 1
        return True

    def _place(self, h: int, units: int) -> bool:
        """Put block `h` on the device, pinned; False when no room can be made."""
        if not self._make_room(units):
            self.counters.rejected += 1
            return False
        self.resident[h] = units
        self.placements += 1
        self._born[h] = self.placements
        self.order.placed(h)
        self.used_units += units
        self._pins_in[h] += 1
        if self.idle_ttl_s > 0:
            self._used_at[h] = self.clock()
        return True

    def expire(self) -> int:
        """Drop every unpinned block of either tier unused for longer than the idle lifetime.
        Output: the blocks dropped (0 without a lifetime)."""
        if self.idle_ttl_s <= 0:
            return 0
        cutoff = self.clock() - self.idle_ttl_s
        old = [h for h, t in self._used_at.items() if t < cutoff and not self.pinned(h)]
        for h in old:
            if h in self.resident:
                self._forget(h)
            else:
                self._host_pop(h)
            self._gone(h)
        self.counters.expired += len(old)
        return len(old)

    # ------------------------------------------------------------------ operations

    def match(self, hashes: list) -> Match:
        """Walk `hashes` from the start while blocks are cached; pin every matched block.

        Host hits are restored to the device (evicting device blocks to make room).
        Output: the Match (blocks found, of which restored from host, and the pinned hashes).
        """
        self.expire()
        pinned = list(takewhile(self.resident.__contains__, hashes))
        self._pins_in.update(pinned)  # before any restore can evict them
        self.order.hit(pinned)
        restored = 0
        if len(pinned) < len(hashes) and self.host:
            for h in hashes[len(pinned):]:
                if h in self.resident:  # past a restored block, a block still on the device
                    self._pins_in[h] += 1
                    self.order.hit((h,))
                    pinned.append(h)
                    continue
                units = self._host_pop(h)
                if units is None:
                    break
                if not self._place(h, units):
                    self._to_host(h, units)
                    break
                pinned.append(h)
                restored += 1
        self.counters.restored += restored
        self._touch(pinned)
        return Match(len(pinned), restored, pinned)

    def _touch(self, hashes: list) -> None:
        if self.idle_ttl_s > 0:
            now = self.clock()
            self._used_at.update(dict.fromkeys(hashes, now))

    def insert(self, hashes: list, units: int = 1) -> list:
        """Insert (or pin, when present) each of `hashes` in order, pinned for the caller.

        The blocks already on the device are pinned first, so placing the others never evicts
        one of them. Stops at the first block that cannot be placed (every resident block
        pinned). Output: the hashes pinned, to pass to `release` later.
        """
        present = [h for h in hashes if h in self.resident]
        self._pins_in.update(present)
        self.order.hit(present)
        ahead = set(present)
        pinned: list = []
        for i, h in enumerate(hashes):
            if h not in ahead:
                u = self._host_pop(h)
                if not self._place(h, units):
                    if u is not None:
                        self._to_host(h, u)
                    rest = [x for x in hashes[i:] if x in ahead]
                    self._pins_out.update(rest)
                    self.order.released(rest, set())  # every pin ends in a release
                    break
                self.counters.inserted += 1
            pinned.append(h)
        self._touch(pinned)
        return pinned

    def release(self, hashes: list, since: int | None = None) -> None:
        """Unpin `hashes` (as returned by match/insert, head first) and give them their place in
        the eviction order (tail- or head-first). `since`: `placements` when the request began
        (blocks placed after it are the request's own; None: all of them)."""
        self._pins_out.update(hashes)
        fresh: set = set()
        if self.order.needs_fresh:
            born = self._born
            fresh = {h for h in hashes if since is None or born.get(h, 0) > since}
        self.order.released(hashes, fresh)

    def drop(self, hashes: list) -> int:
        """Remove `hashes` from both tiers, except blocks pinned by someone. Output: dropped."""
        dropped = 0
        for h in hashes:
            if h in self.resident:
                if self.pinned(h):
                    continue
                self._forget(h)
                dropped += 1
            if self._host_pop(h) is not None:
                dropped += 1
            self._gone(h)
        self.counters.dropped += dropped
        return dropped

    def _drop_unpinned(self) -> int:
        victims = [h for h in self.order if not self.pinned(h)]
        for h in victims:
            self._forget(h)
            self._gone(h)
        for h in self.host:
            self._gone(h)
        count = len(victims) + len(self.host)
        self.host.clear()
        self.host_used_units = 0
        return count

    def evict_unpinned(self) -> int:
        """Evict every block not pinned by an active request, on device and host. Output: count."""
        count = self._drop_unpinned()
        self.counters.evicted += count
        return count

    def clear(self) -> int:
        """Empty the cache except pinned blocks (POST /sim/reset). Output: blocks removed."""
        return self._drop_unpinned()
