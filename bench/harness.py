"""What the benches share: a server in its own process for the length of a block (the simulator,
or another that answers `/health`), CPU pinning, percentiles, the machine a figure was measured
on, a printed table and a JSON file of the figures.

Run a bench from the repository's root as a module (`python -m bench.scale`); each takes
`--json PATH` to write its figures, with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """Output: a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_cpus() -> tuple[set[int], set[int]]:
    """Output: (the CPUs for the client, the last CPU for the simulator), for `--pin` (Linux).
    Exits with a message when this process may run on fewer than two CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    return set(cpus[:-1]), {cpus[-1]}


@dataclass
class Sim:
    """A running simulator process: `root_url` (http://127.0.0.1:PORT), `base_url` (.../v1)."""

    proc: subprocess.Popen
    root_url: str

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    def cpu_seconds(self) -> float:
        """Output: the process's user + system CPU time so far, from /proc (Linux)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(argv: Sequence[str], port: int, what: str, timeout_s: float = 30.0,
           **popen: Any) -> Iterator[subprocess.Popen]:
    """Run `argv`, a server that listens on 127.0.0.1:`port`, while the block runs (`popen`: more
    arguments for `subprocess.Popen`). Yields the process once `GET /health` answers 200;
    RuntimeError naming `what` when the process ends first or `timeout_s` passes. Stops it when
    the block ends (terminate, then kill after 10 s)."""
    proc = subprocess.Popen(list(argv), **popen)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def simulator(*options: str, cpus: set[int] | None = None,
              timeout_s: float = 30.0) -> Iterator[Sim]:
    """Run `python -m workloadlang.sim --port P *options` in its own process (on `cpus` when
    given) while the block runs: its CPU is then not the client's, as with a real engine.
    Yields a `Sim` once `/health` answers; RuntimeError when it does not within `timeout_s`."""
    port = free_port()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    argv = [sys.executable, "-m", "workloadlang.sim", "--port", str(port), *options]
    with server(argv, port, f"the simulator ({' '.join(options)})", timeout_s, cwd=ROOT,
                preexec_fn=pin) as proc:
        yield Sim(proc, f"http://127.0.0.1:{port}")


def pct(values: Sequence[float], q: float) -> float:
    """Output: the `q` quantile (0..1) of `values`, nearest rank; 0.0 for no values."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else 0.0


def machine() -> dict[str, Any]:
    """Output: what a figure was measured on: CPUs this process may use, the CPU model, the
    Python, and the load average (1 minute) when asked."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpus": len(os.sched_getaffinity(0)), "cpu_model": model,
            "python": platform.python_version(), "load_average": round(os.getloadavg()[0], 2)}


def describe_machine(m: dict[str, Any]) -> str:
    """Output: `machine()` as one line."""
    return (f"{m['cpus']} CPUs ({m['cpu_model']}), Python {m['python']}, load average "
            f"{m['load_average']}")


def table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Input: rows (dicts) and columns (key, header, format spec such as ".3f"). Output: an
    aligned text table; a missing or None value prints as "-"."""
    def cell(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    cells = [[header for _, header, _ in columns]]
    cells += [[cell(r, key, spec) for key, _, spec in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(line, widths))) for line in cells]
    return "\n".join(lines)


def add_json_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")


def write_json(path: str | None, bench: str, args: argparse.Namespace, rows: list[dict[str, Any]],
               started: dict[str, Any], **extra: Any) -> None:
    """Write {bench, args, machine (at the start), load average at the end, rows, extra} to
    `path` (nothing when `path` is None)."""
    if not path:
        return
    doc = {"bench": bench, "args": {k: v for k, v in vars(args).items() if k != "json"},
           "machine": started, "load_average_after": round(os.getloadavg()[0], 2),
           "rows": rows, **extra}
    Path(path).write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
