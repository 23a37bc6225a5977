"""The simulator with two probes in its own process, for benches: event-loop lag (how late a
2 ms sleep wakes) and garbage-collector pauses. Serves like `python -m workloadlang.sim` (same
flags, plus --port) and prints both, from the moment it serves, to stderr when stopped with
SIGINT.

Usage: python bench/simprobe.py --port P [sim flags]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import uvicorn  # noqa: E402

from workloadlang.sim.config import add_sim_arguments, config_from_args  # noqa: E402
from workloadlang.sim.server import _uvicorn_config, listen  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    add_sim_arguments(ap)
    ns = ap.parse_args()
    server = uvicorn.Server(_uvicorn_config(config_from_args(ns), "127.0.0.1", ns.port))
    lags: list[float] = []
    pauses: list[float] = []
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2 and server.started:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)

    async def watch() -> None:
        while not server.should_exit:
            t = time.perf_counter()
            await asyncio.sleep(0.002)
            if server.started:  # not the startup (imports, lifespan)
                lags.append(time.perf_counter() - t - 0.002)

    async def run() -> None:
        probe = asyncio.ensure_future(watch())
        await server.serve(sockets=[listen("127.0.0.1", ns.port)])  # kernel-stamped arrivals
        probe.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # uvicorn re-raises the signal it stopped on
        pass
    ms = [x * 1e3 for x in lags]
    print(f"simulator loop lag: n={len(ms)} p50 {pct(ms, .5):.2f} p99 {pct(ms, .99):.2f} "
          f"max {max(ms, default=0):.2f} ms; full GC pauses: {len(pauses)}, max "
          f"{max(pauses, default=0) * 1e3:.1f} ms", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
