"""Burst: how long the client takes to turn around N answers that end at the same instant (an
engine ending a batch), i.e. the client delay of the last session of a burst.

A small raw-asyncio HTTP/1.1 server in its own process (no simulator: its own event loop would
spread the burst) answers each request at once with its head, 20 ms later (a prefill) with a
role chunk and all but the last of `--tokens` token chunks; 30 ms after all N sessions' requests
of a round are in it writes every answer's end at once: the last token, the finish and usage
chunks and `[DONE]`. So a burst holds what a batching engine's does: N streams' ends, then the
heads of the N requests the client sends in reply. The runner's `Executor` drives N sessions of
`--rounds` short turns against it (`concurrency = N`). Reported from the executor's own health
(`results.client`): client delay p50 / p99 / max — for each request, from the previous answer's
end (its kernel arrival stamp) to the send — and max / N, the client's turnaround per session
of a burst.

With `--stream-gap-ms G` there are no bursts: the server streams every answer as soon as it is
asked, each chunk in its own write G ms apart (each token its own packet, as an engine streams),
and the bench reports the client's wall time and CPU time (`time.process_time`, both threads)
per request. With enough sessions (`--sessions 128 --stream-gap-ms 2`) the client is saturated
and wall time per request is its cost per request: the request rate one client process drives.

With `--grow T` each session is one conversation that grows by a T-token user turn a round and
replays every answer (agent-sim's main steps): a request's messages then carry the answer
just in, so it is realised and encoded after that answer's end, on the path to its send,
instead of being made ahead.

Usage: /work/venv/bin/python bench/burst.py [--sessions 64] [--rounds 20] [--tokens 16] [--pin]
       [--stream-gap-ms G] [--grow T]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from client_overhead import WORKLOAD  # N sessions of short fresh turns
from simproc import free_port, split_cpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answer(tokens: int) -> tuple[bytes, list[bytes], bytes]:
    """Output: an answer's head, its first chunks (role, tokens but the last) and its end."""
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    events = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    events += [b'data: {"choices":[{"index":0,"delta":{"content":" w%d"}}]}\n\n' % i
               for i in range(tokens)]
    events.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')
    events.append(b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":%d,'
                  b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n' % tokens)
    events.append(b"data: [DONE]\n\n")
    chunks = [chunk(e) for e in events]
    return head, chunks[:tokens], b"".join(chunks[tokens:]) + b"0\r\n\r\n"


async def serve(port: int, sessions: int, tokens: int, gap_ms: float | None) -> None:
    """The server: answers `/v1/models` at once; holds chat requests until `sessions` are in
    (or, with `gap_ms`, streams each answer at once, a chunk every `gap_ms` ms)."""
    head, pieces, end = answer(tokens)
    start = b"".join(pieces)
    loop = asyncio.get_running_loop()
    models = b'{"data":[{"id":"burst"}]}'
    waiting: list[asyncio.StreamWriter] = []

    async def read_request(reader: asyncio.StreamReader) -> bytes | None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        if length:
            await reader.readexactly(length)
        return head.split(b" ")[1]

    def end_all(writers: list[asyncio.StreamWriter]) -> None:
        for w in writers:
            w.write(end)

    async def trickle(writer: asyncio.StreamWriter) -> None:
        for piece in [*pieces, end]:
            await asyncio.sleep(gap_ms / 1000)
            writer.write(piece)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                path = await read_request(reader)
                if path != b"/v1/chat/completions":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(models), models))
                    continue
                writer.write(head)
                if gap_ms is not None:
                    asyncio.ensure_future(trickle(writer))
                    continue
                loop.call_later(0.02, writer.write, start)
                waiting.append(writer)
                if len(waiting) == sessions:  # the round is in: every answer ends at once
                    loop.call_later(0.03, end_all, list(waiting))
                    waiting.clear()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


GROW = """
workload grow {
  params { streams: int = 64; rounds: int = 20; max_tokens: int = 16; step: tokens = 500 }
  concurrency = $streams
  session s repeat $streams {
    system "You are a helpful assistant."
    repeat $rounds label step { user filler $step; reply $max_tokens replay }
  }
}
"""


async def drive(base: str, sessions: int, rounds: int, tokens: int, grow: int | None) -> dict:
    from workloadlang import api
    from workloadlang.plan.realise import RatioSizer, Realiser
    from workloadlang.run.client import Endpoint
    from workloadlang.run.executor import Executor, ListSink
    from workloadlang.run.transport import make_client

    params = {"streams": str(sessions), "rounds": str(rounds), "max_tokens": str(tokens)}
    if grow is not None:
        params["step"] = str(grow)
    source = api.Source(name="burst.wl", text=WORKLOAD if grow is None else GROW)
    plan = api.make_plan(api.parse_checked(source), source, params, salt="b",
                         env={"max_context": 1 << 20})
    endpoint = Endpoint(base_url=base + "/v1", model="burst")
    async with make_client() as client:
        cpu, wall = time.process_time(), time.perf_counter()
        run = await Executor(plan, Realiser(plan, RatioSizer(1.0)), client, endpoint,
                             ListSink()).run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    errors = [r for r in run.records if r.error]
    if errors:
        raise SystemExit(f"{len(errors)} errors, first: {errors[0].error}")
    n = len(run.records)
    return {**run.client, "wall_us": wall * 1e6 / n, "cpu_us": cpu * 1e6 / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stream-gap-ms", type=float,
                    help="no bursts: stream every answer at once, a chunk every this many ms; "
                         "reports the client's wall time and CPU per request")
    ap.add_argument("--pin", action="store_true", help="server on the last CPU, client on the rest")
    ap.add_argument("--grow", type=int, metavar="T",
                    help="one growing conversation a session, T new tokens a round, answers "
                         "replayed (each request made after the answer before it)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process
    ap.add_argument("--reader-nice", type=int, default=None,
                    help="the socket reader thread's nice value (default: the transport's, 19)")
    args = ap.parse_args()
    if args.reader_nice is not None:
        from workloadlang.run import transport

        transport.READER_NICE = args.reader_nice
    if args.serve:
        asyncio.run(serve(args.serve, args.sessions, args.tokens, args.stream_gap_ms))
        return 0
    port = free_port()
    mine, theirs = split_cpus() if args.pin else (None, None)
    pin = (lambda: os.sched_setaffinity(0, theirs)) if theirs else None
    gap = ["--stream-gap-ms", str(args.stream_gap_ms)] if args.stream_gap_ms is not None else []
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--sessions",
                             str(args.sessions), "--tokens", str(args.tokens), *gap],
                            preexec_fn=pin)
    if mine:
        os.sched_setaffinity(0, mine)
    time.sleep(0.5)
    try:
        maxes = []
        for _ in range(args.repeat):
            health = asyncio.run(drive(f"http://127.0.0.1:{port}", args.sessions, args.rounds,
                                       args.tokens, args.grow))
            maxes.append(health["client_delay_max_ms"])
            if args.stream_gap_ms is not None:
                print(f"{args.sessions} sessions x {args.rounds} rounds streamed: wall "
                      f"{health['wall_us']:.0f} us a request, client CPU {health['cpu_us']:.0f} us")
                continue
            print(f"{args.sessions} sessions x {args.rounds} rounds: client delay p99 "
                  f"{health['client_delay_p99_ms']:.2f} ms, max {health['client_delay_max_ms']:.2f}"
                  f" ms = {health['client_delay_max_ms'] * 1000 / args.sessions:.0f} us a session;"
                  f" loop lag max {health['loop_lag_max_ms']:.2f} ms")
        if args.stream_gap_ms is None:
            print(f"max over runs: median {statistics.median(maxes):.2f} ms")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
