"""The run's start, one write at a time: what a first request's write costs the client.

A sink process on the last CPU accepts N loopback connections and reads whatever comes (what a
server's loop does, without answering); this process, on the other CPUs, writes one ~2.6 KB
chat request on each, the way the runner's start does, and reports microseconds a request:

- `raw send`: `socket.send` of the request's bytes alone (the kernel's share: on loopback it
  also runs the receiving side's TCP processing on the sender's CPU);
- `StartWrites.write`: the runner's start write (stamp, write, keep the connection for the
  answer), on connections claimed before the timed loop (`StartWrites.claim`);
- `begin_reading`: registering each written connection with the socket reader thread (after
  the last write, off the start's critical path);
- `liveness check`: the `MSG_PEEK` read `claim` makes per connection before the clock.

Medians over `--rounds` rounds (fresh connections each round). With `--steer-lo` loopback's
receive processing runs on the sink's CPU meanwhile (`simproc.steer_loopback`, root): what is
left of `raw send` is the sender's own share.

Usage: /work/venv/bin/python bench/start_writes.py [--connections 256] [--rounds 8] [--steer-lo]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import select
import socket
import statistics
import time

import httpx

from simproc import split_cpus, steer_loopback
from workloadlang.run import transport as tr


def sink(port_q: mp.Queue, stop: mp.Event, cpus: set[int]) -> None:
    """Accept connections and read everything sent on them until `stop`."""
    os.sched_setaffinity(0, cpus)
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port_q.put(listener.getsockname()[1])
    poll = select.epoll()
    poll.register(listener.fileno(), select.EPOLLIN)
    conns: dict[int, socket.socket] = {}
    while not stop.is_set():
        for fd, _ in poll.poll(0.1):
            if fd == listener.fileno():
                conn, _ = listener.accept()
                conn.setblocking(False)
                conns[conn.fileno()] = conn
                poll.register(conn.fileno(), select.EPOLLIN)
                continue
            try:
                if not conns[fd].recv(1 << 20):
                    poll.unregister(fd)
                    conns.pop(fd).close()
            except BlockingIOError:
                pass


def requests(client: httpx.AsyncClient, url: str, n: int, k: int) -> list[httpx.Request]:
    """Output: `n` chat requests prepared for the start (`ready_to_write`), each its own."""
    body = b'{"messages": [{"role": "user", "content": "' + b"word " * 500 + b'"}]}'
    out = []
    for i in range(n):
        req = tr.build_request("POST", url, {"Content-Type": "application/json",
                                             "X-WL-Request": f"r{k}-{i}"}, body, 60.0)
        tr.ready_to_write(client, req)
        out.append(req)
    return out


async def one_round(client: httpx.AsyncClient, transport: tr.WireTransport, url: str,
                    origin: tuple[str, int], n: int, k: int) -> dict[str, float]:
    """Output: microseconds a request for each measured step, on fresh connections."""
    per = {}
    await tr.open_connections(client, url, n)
    reqs = requests(client, url, n, k)
    writes = tr.StartWrites.claim(client, url, n)
    t = time.perf_counter()
    for req in reqs:
        writes.write(req)
    per["StartWrites.write"] = time.perf_counter() - t
    t = time.perf_counter()
    conns = list(writes.written)
    writes.begin_reading()
    per["begin_reading"] = time.perf_counter() - t
    for conn in conns:
        conn.close()
    await tr.open_connections(client, url, n)
    idle = transport._idle[origin]  # noqa: SLF001 (the bench reaches into the pool)
    t = time.perf_counter()
    for conn in idle:
        conn.alive()
    per["liveness check"] = time.perf_counter() - t
    payload = reqs[0].extensions["wl_payload"]
    t = time.perf_counter()
    for conn in idle:
        conn.sock.send(payload)
    per["raw send"] = time.perf_counter() - t
    for conn in idle:
        conn.close()
    idle.clear()
    await asyncio.sleep(0.1)  # the sink reads and closes its side
    return {name: s / n * 1e6 for name, s in per.items()}


async def measure(port: int, n: int, rounds: int) -> dict[str, list[float]]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    transport = tr.WireTransport()
    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(transport=transport) as client:
        for k in range(rounds):
            for name, us in (await one_round(client, transport, url, ("127.0.0.1", port),
                                             n, k)).items():
                out.setdefault(name, []).append(us)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steer-lo", action="store_true",
                    help="run loopback's receive processing on the sink's CPU (needs root)")
    args = ap.parse_args()
    mine, theirs = split_cpus()
    with steer_loopback(theirs) if args.steer_lo else contextlib.nullcontext():
        results = run(args, mine, theirs)
    print(f"{args.connections} connections, {args.rounds} rounds: microseconds a request, "
          "median (min-max over rounds)" + (", loopback steered" if args.steer_lo else ""))
    for name, us in results.items():
        print(f"  {name:18s} {statistics.median(us):6.1f}  ({min(us):.1f}-{max(us):.1f})")


def run(args: argparse.Namespace, mine: set[int], theirs: set[int]) -> dict[str, list[float]]:
    """Output: `measure` against a sink process on `theirs`, this process on `mine`."""
    port_q, stop = mp.Queue(), mp.Event()
    proc = mp.Process(target=sink, args=(port_q, stop, theirs))
    proc.start()
    try:
        port = port_q.get(timeout=10)
        os.sched_setaffinity(0, mine)
        results = asyncio.run(measure(port, args.connections, args.rounds))
    finally:
        stop.set()
        proc.join()
    return results


if __name__ == "__main__":
    main()
