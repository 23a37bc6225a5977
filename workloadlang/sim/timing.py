"""The simulator's time model (closed-form costs) and its FIFO slot pool.

Input: token positions and per-token costs in microseconds. Output: durations in seconds.
"""

from __future__ import annotations

import asyncio
from collections import deque


def prefill_seconds(start: int, end: int, us_per_token: float, ctx_scale: float) -> float:
    """Cost of computing prompt positions [start, end).

    Per-token cost at position p is us_per_token x (1 + p / ctx_scale) (no growth when
    ctx_scale is 0), summed in closed form: n + (sum of positions) / ctx_scale.
    """
    n = end - start
    if n <= 0 or us_per_token <= 0:
        return 0.0
    units = float(n)
    if ctx_scale > 0:
        units += (start + end - 1) * n / 2.0 / ctx_scale
    return us_per_token * units / 1e6


def decode_seconds(context: int, us_per_token: float, ctx_scale: float) -> float:
    """Cost of generating one token with `context` tokens already in the sequence."""
    if us_per_token <= 0:
        return 0.0
    if ctx_scale > 0:
        return us_per_token * (1.0 + context / ctx_scale) / 1e6
    return us_per_token / 1e6


def restore_seconds(tokens: int, us_per_token: float) -> float:
    """Cost of restoring `tokens` from the host tier to the device."""
    return tokens * us_per_token / 1e6 if tokens > 0 and us_per_token > 0 else 0.0


class SlotPool:
    """N concurrent slots; requests beyond them wait in strict FIFO order.

    Must be used from one event loop. A waiter cancelled while queued leaves the queue; a
    waiter cancelled right after being handed a slot gives it back.
    """

    def __init__(self, slots: int) -> None:
        self.free = slots
        self._waiters: deque = deque()

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return sum(1 for f in self._waiters if not f.done())

    async def acquire(self) -> None:
        """Wait for a slot (FIFO)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        """Give a slot back: to the oldest waiter if any, else to the pool."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.free += 1
