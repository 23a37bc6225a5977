"""The client's own health during a run: did it hold requests back?

Input: from the executor, each request's send against the moment it was due (`ClientHealth.sent`)
and each record (`recorded`); the event loop's lag (a 5 ms sleep, how late it wakes: `Lag`) and
the garbage collector's pauses (`GcPauses`), watched while the run is on. Output: the results'
`client` fields (`summary`, docs/cli.md): loop lag, client delays, the worst delay's evidence
(when, what else was sent meanwhile, how much of it the collector ran), late first-token stamps,
the longest collector pause, and whether the client was the bottleneck (`bottleneck`).

The heap: what exists when the run starts (the plan, the modules, the realised texts) and what
the run keeps (records, answers) is moved out of the collector's scans (`gc.freeze`), so a full
collection mid-run walks only what the run made since (a 70 ms pause stalled every stream at 64
sessions otherwise; 50 ms full and 10-15 ms middle-generation pauses at 256 sessions).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

_FREEZE_EVERY = 32  # records between two gc.freeze() during a run
_DELAY_BOUND_S = 0.010  # a client that holds requests back longer than this skews the run
_BOTTLENECK_SHARE = 0.01  # ...when that is also more than this share of a median request
LATE_S = 0.010  # a request sent this much after its planned send time is counted late
QUIET_S = 0.001  # a loop that wakes this little late is quiet: a decisive measurement may go
QUIET_MAX_S = 0.1  # how long a decisive measurement waits for a quiet client, at most


class Lag:
    """Event-loop lag monitor: how late a 5 ms sleep wakes up (the client as a bottleneck), and
    for the latest of the worst wake-ups how long the loop's thread ran in its interval (its
    CPU time, `cpu_clock`): much less than the interval, the operating system ran something
    else on its CPU and the lag is not the client's own work. About all of it does not prove
    the client was busy: in a VM, time in which the host did not run the virtual CPU at all is
    counted as the thread's own (only the kernel's samples of that CPU tell the two apart,
    e.g. `perf record -C`)."""

    def __init__(self, clock: Callable[[], float],
                 cpu_clock: Callable[[], float] = time.thread_time):
        self.clock, self.cpu_clock = clock, cpu_clock
        self.samples: list[float] = []
        # (lag, the thread's CPU in its interval, when it ended on `clock`)
        self.worst: tuple[float, float, float] | None = None

    async def watch(self) -> None:
        while True:
            t, cpu = self.clock(), self.cpu_clock()
            await asyncio.sleep(0.005)
            lag = max(0.0, self.clock() - t - 0.005)
            self.samples.append(lag)
            if self.worst is None or lag >= self.worst[0]:
                self.worst = (lag, self.cpu_clock() - cpu, self.clock())


class GcPauses:
    """The garbage collector's pauses during the run (`gc.callbacks`): the longest one and its
    generation, so that a loop stall the client's thread spent running can be told apart from
    a collection. `clock` is a monotonic clock (tests inject one). The latest `keep` pauses
    are kept, so that a request's wait can be asked how much of it was the collector's
    (`within`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, keep: int = 256):
        self.clock = clock
        self.started: float | None = None
        self.longest: tuple[float, int] | None = None  # (seconds, generation)
        self.count = 0
        self.recent: deque[tuple[float, float]] = deque(maxlen=keep)  # (start, end) on clock

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = self.clock()
        elif self.started is not None:
            end = self.clock()
            self.recent.append((self.started, end))
            pause, self.started = end - self.started, None
            self.count += 1
            if self.longest is None or pause > self.longest[0]:
                self.longest = (pause, info.get("generation", -1))

    def within(self, begin: float, end: float) -> float:
        """Output: seconds of [begin, end] (on `clock`) in which the collector ran, from the
        pauses kept."""
        return sum(min(e, end) - max(s, begin) for s, e in self.recent if e > begin and s < end)


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class ClientHealth:
    """Watches the client through one run (see the module). `clock`: the executor's clock;
    `cpu_clock`: the loop thread's CPU time (`Lag`)."""

    def __init__(self, clock: Callable[[], float],
                 cpu_clock: Callable[[], float] = time.thread_time,
                 process_cpu: Callable[[], float] = time.process_time) -> None:
        self.clock, self.process_cpu = clock, process_cpu
        self.cpu: list[float] = []  # the process's CPU time at the start and at the stop
        self.lag = Lag(clock, cpu_clock)
        self.gcs = GcPauses(clock)
        self.delays: list[float] = []
        # (delay, due, sent, of it the collector's pauses)
        self.worst_delay: tuple[float, float, float, float] | None = None
        self.sends: list[float] = []  # every request's send time
        self.lags: list[float] = []  # of requests with a planned send time: sent minus planned
        self.unfrozen = 0  # records since the last gc.freeze()
        self.t0 = 0.0
        self.task: asyncio.Task[None] | None = None
        self.quiet_waits: list[float] = []  # decisive measurements' waits for a quiet client

    def before_clock(self) -> None:
        """What exists now lives through the run: out of the collector's scans."""
        gc.collect()
        gc.freeze()

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.cpu = [self.process_cpu()]
        self.task = asyncio.ensure_future(self.lag.watch())
        self.gcs.__enter__()

    def stop(self) -> None:
        if len(self.cpu) == 1:
            self.cpu.append(self.process_cpu())
        if self.task is not None:
            self.task.cancel()
            self.gcs.__exit__()
            self.task = None
        gc.unfreeze()

    def sent(self, due: float, t_send: float, waited: float,
             send_at: float | None = None) -> None:
        """A request due at `due` (the moment it could go: its session went on, a barrier
        opened, its planned wait or send time came) was sent at `t_send`, after waiting
        `waited` for its turn (the run's isolation, a concurrency slot): the rest is the
        client's own delay (the event loop getting to it, making it when that could not be
        done ahead). `send_at`: its planned send time (s from the start), whose lag
        (`t_send` - start - `send_at`) is its schedule lag."""
        if send_at is not None:
            self.lags.append(t_send - self.t0 - send_at)
        own = t_send - due - waited
        self.delays.append(max(0.0, own))
        self.sends.append(t_send)
        if self.worst_delay is None or own > self.worst_delay[0]:
            self.worst_delay = (own, due, t_send, self.gcs.within(due, t_send))

    async def quiet(self, flush: Callable[[], None] = lambda: None) -> float:
        """Do the client's deferred work now (`flush`), then wait until it is quiet (its event
        loop's latest wake-up late by under `QUIET_S`), at most `QUIET_MAX_S`: a decisive
        measurement then starts with nothing of the client's own in the way. Output: seconds
        waited (0 when it was quiet)."""
        flush()
        samples = self.lag.samples
        if self.task is None or not samples or samples[-1] < QUIET_S:
            return 0.0
        t0 = self.clock()
        while self.clock() - t0 < QUIET_MAX_S:
            seen = len(samples)
            while len(samples) == seen and self.clock() - t0 < QUIET_MAX_S:
                await asyncio.sleep(0.001)
            if samples[-1] < QUIET_S:
                break
        self.quiet_waits.append(self.clock() - t0)
        return self.quiet_waits[-1]

    def recorded(self) -> None:
        """A record was kept: every `_FREEZE_EVERY` of them, what the run keeps joins the
        frozen heap, so no collection walks the whole run's results."""
        self.unfrozen += 1
        if self.unfrozen >= _FREEZE_EVERY:
            self.unfrozen = 0
            gc.freeze()

    def summary(self, outcomes: Iterable[Any], isolation: dict[str, Any]) -> dict[str, Any]:
        """Output: the results' `client` fields, from the watch and the run's `outcomes`
        (`ttft_late_s`, `e2e_s`) and the isolation's cost (`Isolation.summary`)."""
        ms = _ms
        lag, late = self.lag, [o.ttft_late_s for o in outcomes if o.ttft_late_s is not None]
        e2e = [o.e2e_s for o in outcomes if o.e2e_s]
        health = {
            "loop_lag_p99_ms": ms(percentile(lag.samples, 0.99)),
            "loop_lag_max_ms": ms(max(lag.samples, default=None)),
            # of the worst lag's interval (5 ms + the lag), how long the loop's thread ran
            "loop_lag_max_ran_ms": ms(lag.worst[1] if lag.worst else None),
            # when it ended, in seconds since the run's start (the records' t_start_s)
            "loop_lag_max_at_s": round(lag.worst[2] - self.t0, 3) if lag.worst else None,
            "client_delay_p99_ms": ms(percentile(self.delays, 0.99)),
            "client_delay_max_ms": ms(max(self.delays, default=None)),
            **self._worst_delay_evidence(),
            # how many requests the client delayed more than `_DELAY_BOUND_S`
            "client_delay_over_10ms": sum(1 for d in self.delays if d > _DELAY_BOUND_S),
            # how many first-token stamps may be more than 1 ms late, and the largest bound
            "ttft_late": len(late),
            "ttft_late_max_ms": ms(max(late, default=None)),
            # the collector's longest pause during the run, and its generation
            "gc_pause_max_ms": ms(self.gcs.longest[0] if self.gcs.longest else None),
            "gc_pause_max_generation": self.gcs.longest[1] if self.gcs.longest else None,
            # what `isolated` requests cost (run.isolation), their waits for a quiet client
            **isolation, "quiet_waits": len(self.quiet_waits),
            "quiet_wait_s": round(sum(self.quiet_waits), 6),
            **schedule_summary(self.lags),
            # the process's CPU time (all its threads) from the run's start to its end
            "cpu_s": round(self.cpu[1] - self.cpu[0], 3) if len(self.cpu) == 2 else None,
        }
        health["client_bottleneck"] = bottleneck(
            max(percentile(lag.samples, 0.99) or 0.0, percentile(self.delays, 0.99) or 0.0),
            statistics.median(e2e) if e2e else None)
        return health

    def _worst_delay_evidence(self) -> dict[str, Any]:
        """Output: of the request the client delayed most, when it was sent (seconds since the
        run's start), how many other requests the client sent while it waited (about none when
        the loop stalled: its own work, the collector, or no CPU; N - 1 when it came last of N
        answers that ended together and were turned around one by one) and how long of the
        wait the garbage collector ran (ms)."""
        if self.worst_delay is None:
            return {"client_delay_max_at_s": None, "client_delay_max_sends_meanwhile": None,
                    "client_delay_max_gc_ms": None}
        _, due, sent, collector = self.worst_delay
        meanwhile = sum(1 for t in self.sends if due < t < sent)
        return {"client_delay_max_at_s": round(sent - self.t0, 3),
                "client_delay_max_sends_meanwhile": meanwhile,
                "client_delay_max_gc_ms": round(collector * 1000, 3)}


def schedule_summary(lags: list[float]) -> dict[str, Any]:
    """Input: the schedule lags of the requests with a planned send time (sent minus
    planned, s). Output: their count, p50, p99 and max (ms) and how many were late by more
    than `LATE_S` (`schedule_late`): the load they made came later than planned."""
    ms = _ms
    return {"scheduled": len(lags), "schedule_lag_p50_ms": ms(percentile(lags, 0.5)),
            "schedule_lag_p99_ms": ms(percentile(lags, 0.99)),
            "schedule_lag_max_ms": ms(max(lags, default=None)),
            "schedule_late": sum(1 for v in lags if v > LATE_S)}


def bottleneck(worst_p99_s: float, e2e_median_s: float | None) -> bool:
    """Input: the larger of the loop lag's and the client delay's 99th percentiles, the median
    request's end-to-end time (None when none completed). Output: True when the client held
    requests back enough to shape the load: a p99 above `_DELAY_BOUND_S` that is also more than
    `_BOTTLENECK_SHARE` of a median request (12 ms in front of 10-second requests changes the
    offered load by a tenth of a percent; in front of 10 ms requests it doubles their time)."""
    if worst_p99_s <= _DELAY_BOUND_S:
        return False
    return e2e_median_s is None or worst_p99_s > _BOTTLENECK_SHARE * e2e_median_s


def _ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds to the microsecond (None stays None)."""
    return None if seconds is None else round(seconds * 1000, 3)
