"""The simulator's emission log: when each token's bytes were handed to the socket.

Input: a request's planned id (`X-WL-Request`, else the job's own id) and the instant each
batch of its tokens was written (`time.perf_counter`, the system's monotonic clock on Linux:
the same clock a client on this machine stamps with). Output: per request, one time per token,
in order (`times`), for the last `keep` requests (`GET /sim/emissions`): the ground truth a
client's inter-token latencies are checked against (bench/itl_truth.py).
"""

from __future__ import annotations

from collections import OrderedDict


class EmissionLog:
    """The write time of every token of the last `keep` requests (0: nothing is kept)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.times: OrderedDict[str, list[float]] = OrderedDict()

    def wrote(self, key: str, tokens: int, at: float) -> None:
        """`tokens` more tokens of request `key` were written at `at`."""
        if not self.keep or tokens <= 0:
            return
        found = self.times.get(key)
        if found is None:
            found = self.times[key] = []
            while len(self.times) > self.keep:
                self.times.popitem(last=False)
        found.extend([at] * tokens)

    def snapshot(self) -> dict[str, list[float]]:
        """Output: request -> its tokens' write times, oldest request first."""
        return {k: list(v) for k, v in self.times.items()}
