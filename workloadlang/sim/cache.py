"""The block-hashed prefix cache: a device tier with LRU eviction and pinning, and an optional
host tier that receives evicted blocks and restores them on a hit.

Input: chained block hashes (see `tokenizer.chain_hashes`). Output: match results (how many
leading blocks hit, how many came back from the host), and counters for /metrics.

Capacity is counted in units of one block; a block inserted under the `duplicate_blocks` fault
costs two units. Pinned blocks (held by active requests) are never evicted: eviction skips them
(moving them to the MRU end). Releasing a request's blocks touches them tail-first, so the head
of a prefix is the most recently used and a prefix is evicted from its tail.

Pin counts are two `Counter`s (pins in, pins out) so that pinning and unpinning a 10k-block
prefix are C-level bulk updates rather than a Python loop per block.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from itertools import takewhile


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


class PrefixCache:
    """Device + host prefix cache over block hashes; all methods are synchronous."""

    def __init__(self, block_size: int, device_tokens: int, host_tokens: int = 0) -> None:
        self.block_size = block_size
        self.device_units = device_tokens // block_size
        self.host_units = host_tokens // block_size
        self.resident: dict[int, int] = {}  # device hash -> units
        self.lru: OrderedDict[int, None] = OrderedDict()  # every device block, LRU first
        self._pins_in: Counter = Counter()  # device hash -> times pinned
        self._pins_out: Counter = Counter()  # device hash -> times released
        self.host: OrderedDict[int, int] = OrderedDict()  # host hash -> units, LRU first
        self.used_units = 0
        self.host_used_units = 0
        self.counters = CacheCounters()

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
        self.lru.pop(h, None)
        units = self.resident.pop(h)
        self.used_units -= units
        return units

    def _to_host(self, h: int, units: int) -> None:
        if self.host_units <= 0:
            return
        while self.host and self.host_used_units + units > self.host_units:
            _, u = self.host.popitem(last=False)
            self.host_used_units -= u
            self.counters.host_dropped += 1
        if self.host_used_units + units <= self.host_units:
            self.host[h] = units
            self.host_used_units += units

    def _make_room(self, units: int) -> bool:
        """Evict LRU unpinned device blocks (to the host tier) until `units` fit."""
        if units > self.device_units:
            return False
        lru, skipped = self.lru, 0
        while self.used_units + units > self.device_units:
            if skipped >= len(lru):
                return False  # every resident block is pinned
            h = next(iter(lru))
            if self.pinned(h):
                lru.move_to_end(h)
                skipped += 1
                continue
            self._to_host(h, self._forget(h))
            self.counters.evicted += 1
            skipped = 0
        return True

    def _place(self, h: int, units: int) -> bool:
        """Put block `h` on the device (MRU), pinned; False when no room can be made."""
        if not self._make_room(units):
            self.counters.rejected += 1
            return False
        self.resident[h] = units
        self.lru[h] = None
        self.used_units += units
        self._pins_in[h] += 1
        return True

    # ------------------------------------------------------------------ operations

    def match(self, hashes: list) -> Match:
        """Walk `hashes` from the start while blocks are cached; pin every matched block.

        Host hits are restored to the device (evicting LRU device blocks to make room).
        Output: the Match (blocks found, of which restored from host, and the pinned hashes).
        """
        pinned = list(takewhile(self.resident.__contains__, hashes))
        self._pins_in.update(pinned)  # before any restore can evict them
        restored = 0
        if len(pinned) < len(hashes) and self.host:
            for h in hashes[len(pinned):]:
                units = self.host.pop(h, None)
                if units is None:
                    break
                self.host_used_units -= units
                if not self._place(h, units):
                    self._to_host(h, units)
                    break
                pinned.append(h)
                restored += 1
        self.counters.restored += restored
        return Match(len(pinned), restored, pinned)

    def insert(self, hashes: list, units: int = 1) -> list:
        """Insert (or pin, when present) each of `hashes` in order, pinned for the caller.

        Stops at the first block that cannot be placed (every resident block pinned).
        Output: the hashes pinned, to pass to `release` later.
        """
        pinned: list = []
        for h in hashes:
            if h in self.resident:
                self._pins_in[h] += 1
            else:
                u = self.host.pop(h, None)
                if u is not None:
                    self.host_used_units -= u
                if not self._place(h, units):
                    if u is not None:
                        self._to_host(h, u)
                    break
                self.counters.inserted += 1
            pinned.append(h)
        return pinned

    def release(self, hashes: list) -> None:
        """Unpin `hashes` (as returned by match/insert) and touch them tail-first, so the head
        of the prefix ends up most recently used."""
        self._pins_out.update(hashes)
        deque(map(self.lru.move_to_end, reversed(hashes)), maxlen=0)

    def drop(self, hashes: list) -> int:
        """Remove `hashes` from both tiers, except blocks pinned by someone. Output: dropped."""
        dropped = 0
        for h in hashes:
            if h in self.resident:
                if self.pinned(h):
                    continue
                self._forget(h)
                dropped += 1
            u = self.host.pop(h, None)
            if u is not None:
                self.host_used_units -= u
                dropped += 1
        self.counters.dropped += dropped
        return dropped

    def _drop_unpinned(self) -> int:
        victims = [h for h in self.lru if not self.pinned(h)]
        for h in victims:
            self._forget(h)
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
