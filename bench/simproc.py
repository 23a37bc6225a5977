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
from pathlib import Path

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
