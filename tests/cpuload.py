"""A real CPU load on this machine for a test: processes that spin, started and stopped by PID,
placed over a part of a run by watching the engine answer it.

    with cpu_load(2) as pids: ...                    # two spinning processes for the block
    with served_sim(sim_args) as (url, args):        # a simulator served apart, to watch
        with placed_load(records, "over_finalize", 2, url): wl_run(..., *args, "--records", ...)

`placed_load` places the load by when the engine at `url` answered the run's first finalize:
`both` from the start to the end, `over_finalize` from the start until then, `over_baselines`
from then to the end. The records cannot tell it: a stretch timed alone is recorded once it
ends, when it may have been measured again (`run.stretch`). The simulator names the requests
it answered (`/sim/state`'s `answered`); llama-server does not, so on it the finalize is the
first request answered after every sub-agent's record is written (one session, one request at
a time: agent-sim's finalize follows its sub-agents, whose records are written before it is
sent), seen by `llamacpp:tokens_predicted_total` growing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

SPIN = ("import os, sys\nparent, i = int(sys.argv[1]), 0\nwhile True:\n    i += 1\n"
        "    if i % 2_000_000 == 0 and os.getppid() != parent:\n        break\n")
"""Spins until stopped, or until the process that started it is gone (an interrupted test or
bench leaves no load behind)."""


def start_load(n: int) -> list[int]:
    """Output: the PIDs of `n` new processes that spin on a CPU each until stopped."""
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
            for _ in range(n)]


def stop_load(pids: list[int]) -> None:
    """Stop the processes `pids` (started by `start_load`), and reap them."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    pids.clear()


@contextmanager
def cpu_load(n: int) -> Iterator[list[int]]:
    pids = start_load(n)
    try:
        yield pids
    finally:
        stop_load(pids)


class FinalizeAnswered:
    """A check that is True once the engine at `url` (a base URL ending in /v1) has answered the
    run's first finalize (see the module); `records`: the run's records file, `subs`: its
    session's sub-agents (llama-server only). `close` when done."""

    def __init__(self, url: str, records: Path, subs: int = 2) -> None:
        self.root = url.rstrip("/").removesuffix("/v1")
        self.records, self.subs = records, subs
        self.client = httpx.Client(timeout=5)  # one connection kept: each look one round trip
        self.sim = self.client.get(f"{self.root}/sim/state").status_code == 200
        self.seen: float | None = None  # llama-server: tokens predicted when the subs were recorded

    def __call__(self) -> bool:
        if self.sim:
            return any("/finalize/" in i for i in
                       self.client.get(f"{self.root}/sim/state").json()["answered"])
        if self.seen is None:
            if records_with(self.records, "sub") >= self.subs:
                self.seen = predicted(self.client, self.root)
            return False
        return predicted(self.client, self.root) > self.seen

    def close(self) -> None:
        self.client.close()


def records_with(records: Path, label: str) -> int:
    """Output: how many records of `records` (JSONL) are labelled `label`."""
    try:
        return records.read_text(encoding="utf-8").replace(" ", "").count(f'"label":"{label}"')
    except OSError:
        return 0


def predicted(client: httpx.Client, root: str) -> float:
    """Output: llama-server's `llamacpp:tokens_predicted_total` (its requests' decoded tokens,
    counted as each ends)."""
    for line in client.get(f"{root}/metrics").text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total"):
            return float(line.split()[-1])
    raise RuntimeError(f"{root}/metrics has no llamacpp:tokens_predicted_total")


POLL_S = 0.02  # how often the engine is asked: seldom enough not to load it


@contextmanager
def placed_load(records: Path, where: str, n: int = 2, url: str | None = None,
                subs: int = 2) -> Iterator[list[tuple[str, float]]]:
    """A load of `n` spinning processes over a part of the run writing `records` against the
    engine at `url` (see the module: `both`, `over_finalize`, `over_baselines`; `url` is
    needed but for `both`), stopped when the block ends at the latest. Output (yielded): when
    the load started and stopped (`("start" | "stop", unix time)`, filled as it goes)."""
    events: list[tuple[str, float]] = []
    pids: list[int] = []
    done = threading.Event()
    answered = FinalizeAnswered(url, records, subs) if where != "both" and url else None
    if answered is None and where != "both":
        raise ValueError(f"placed_load {where!r} needs the engine's url")

    def start() -> None:
        pids.extend(start_load(n))
        events.append(("start", time.time()))

    def watch() -> None:
        while not done.is_set() and not answered():
            time.sleep(POLL_S)
        if done.is_set():
            return
        if where == "over_finalize":
            stop_load(pids)
            events.append(("stop", time.time()))
        elif where == "over_baselines":
            start()

    if where != "over_baselines":
        start()
    watcher = threading.Thread(target=watch, daemon=True)
    if answered is not None:
        watcher.start()
    try:
        yield events
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        if pids:
            stop_load(pids)
            events.append(("stop", time.time()))
        if answered is not None:
            answered.close()


SIM_PREFIX = "--sim-"


@contextmanager
def served_sim(args: list[str], preset: str = "agent-sim") -> Iterator[tuple[str, list[str]]]:
    """`wl run --sim ARGS` with its simulator served apart (`wl sim serve`, the `preset`), so
    that it can be watched. Output (yielded): its base URL, and ARGS without the simulator's
    options, with `--base-url` to it."""
    sim, rest, i = [], [], 0
    while i < len(args):
        if args[i].startswith(SIM_PREFIX):
            sim += ["--" + args[i][len(SIM_PREFIX):], args[i + 1]]
            i += 2
        else:
            rest.append(args[i])
            i += 1
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "workloadlang.cli", "sim", "serve", "--port",
                             str(port), "--preset", preset, *sim],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"wl sim serve {' '.join(sim)} did not start")
            time.sleep(0.05)
        yield url, [*rest, "--base-url", url]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
