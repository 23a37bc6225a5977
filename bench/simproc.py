"""Start the simulator in its own process for a bench (so its CPU is not the client's).

Input: a port and `python -m workloadlang.sim` options. Output: the running process, once
`/health` answers (or RuntimeError after 20 s).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_cpus() -> tuple[set[int], set[int]]:
    """Output: (CPUs for the client, the last CPU for the simulator), for `--pin` (Linux).
    Exits with a message when this process may run on fewer than two CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    return set(cpus[:-1]), {cpus[-1]}


LOOPBACK_RPS = "/sys/class/net/lo/queues/rx-0/rps_cpus"


def cpu_mask(cpus: set[int]) -> str:
    """Output: `cpus` as the kernel writes a CPU mask: hexadecimal, in groups of 32 CPUs
    separated by commas, the highest first (`{0, 33}` -> "2,00000001")."""
    bits = sum(1 << c for c in cpus)
    groups = []
    while True:
        groups.append(bits & 0xFFFFFFFF)
        bits >>= 32
        if not bits:
            break
    return ",".join([f"{groups[-1]:x}", *(f"{g:08x}" for g in reversed(groups[:-1]))])


@contextmanager
def steer_loopback(cpus: set[int], path: str = LOOPBACK_RPS) -> Iterator[str]:
    """Run loopback's receive processing on `cpus` while the block runs (Receive Packet
    Steering: `path` holds the mask), then put back what was there. Yields the mask before.

    Why: on loopback the kernel runs the receiving socket's TCP processing inside the
    sender's system call, on the sender's CPU. Each request the client writes then also costs
    the client's CPU the simulator's receive work (bench/start_writes.py: about 19 of a 25 us
    start write); across a network that work is the server machine's. Steered to the simulator's CPU,
    the client's CPU does the client's work. Needs root (SystemExit with a message otherwise)."""
    try:
        with open(path) as f:
            before = f.read().strip()
        with open(path, "w") as f:
            f.write(cpu_mask(cpus))
    except OSError as exc:
        raise SystemExit(f"--steer-lo: cannot set {path} ({exc.strerror}; needs root)") from None
    try:
        yield before
    finally:
        with open(path, "w") as f:
            f.write(before)


def start_sim(port: int, *options: str, script: str | None = None,
              cpus: set[int] | None = None) -> subprocess.Popen:
    """`script`: a file to run instead of `-m workloadlang.sim` (same flags); `cpus`: pin the
    simulator process to these CPUs (Linux)."""
    entry = [script] if script else ["-m", "workloadlang.sim"]
    cmd = [sys.executable, *entry, "--port", str(port), *options]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, cwd=ROOT, preexec_fn=pin)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("simulator did not start")
