"""The simulator's server-side times start when a request reached its socket (the kernel's
receive stamp on Linux), not when its busy event loop got round to reading it: a request that
waits in the socket while the loop is blocked has that wait in its `ttft_ms` / `ttfb_ms`.
Real HTTP on loopback; the server runs on an event loop the test can block."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import uvicorn

from workloadlang.sim import SimConfig
from workloadlang.sim import server as sim_server

BLOCK_S = 0.3
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="kernel receive stamps are Linux's"),
              pytest.mark.alone]  # it reads time: nothing else of the suite in flight


class LoopSim:
    """A simulator served on an event loop this test holds (`block` stalls it)."""

    def __init__(self) -> None:
        self.sock = sim_server.listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        config = SimConfig(prefill_us_per_token=0.0, decode_us_per_token=0.0)
        self.server = uvicorn.Server(sim_server._uvicorn_config(config, "127.0.0.1", self.port))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.005)
        assert self.server.started

    def _run(self) -> None:
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def block(self, seconds: float) -> threading.Event:
        """Stall the server's event loop for `seconds`; the event is set once it is stalled."""
        stalled = threading.Event()

        def stall() -> None:
            stalled.set()
            time.sleep(seconds)

        self.loop.call_soon_threadsafe(stall)
        return stalled

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def loop_sim():
    s = LoopSim()
    yield s
    s.stop()


def timings_of(port: int, client: httpx.Client) -> dict:
    """One streamed chat completion; output: the `timings` of its last chunk."""
    body = {"model": "wl-sim", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}}
    timings = {}
    with client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                       json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                timings = json.loads(line[6:]).get("timings") or timings
    return timings


def test_a_request_waiting_in_the_socket_counts_as_server_time(loop_sim):
    with httpx.Client(timeout=30) as client:
        quick = timings_of(loop_sim.port, client)  # connects; nothing blocks
        assert quick["ttft_ms"] < BLOCK_S * 1000 / 3
        assert loop_sim.block(BLOCK_S).wait(5)  # the loop is asleep from here on
        slow = timings_of(loop_sim.port, client)
    # sent while the loop slept: its bytes waited ~BLOCK_S in the socket before the read
    assert slow["ttft_ms"] >= BLOCK_S * 1000 * 0.8
    assert slow["ttfb_ms"] >= slow["ttft_ms"]


def test_without_kernel_stamps_the_read_starts_the_clock(loop_sim, monkeypatch):
    """The fallback (no SO_TIMESTAMPNS): the same wait is not seen; what the test above shows
    comes from the kernel's stamp."""
    monkeypatch.setattr(sim_server.stamps, "enable", lambda sock: False)
    with httpx.Client(timeout=30) as client:
        timings_of(loop_sim.port, client)  # a connection accepted without stamps
        assert loop_sim.block(BLOCK_S).wait(5)
        slow = timings_of(loop_sim.port, client)
    assert slow["ttft_ms"] < BLOCK_S * 1000 / 3


def test_accepted_connections_send_without_nagle():
    """Small SSE chunks must leave at once: with Nagle on, each waits for the client's delayed
    ACK (~40 ms on Linux), which the overhead bench would charge to the client."""
    listener = sim_server.listen("127.0.0.1", 0)
    with listener, socket.create_connection(listener.getsockname()[:2]):
        conn, _ = listener.accept()
        with conn:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert conn.proto == socket.IPPROTO_TCP  # what asyncio checks before its own setting


def test_wl_sim_serve_on_a_busy_port_is_a_usage_error():
    """`wl sim serve` binds its own socket: a busy port is a message and exit 2."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "workloadlang.cli", "sim", "serve", "--port",
                            str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr


def test_wl_run_sim_that_cannot_listen_is_an_endpoint_error(tmp_path, monkeypatch, capsys):
    """`wl run --sim` when the simulator cannot listen: a message and exit 3, no traceback."""
    from runhelp import wl_run

    def refuse(host: str, port: int) -> socket.socket:
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(sim_server, "listen", refuse)
    code, _ = wl_run(tmp_path, "agent-sim", "--sim", "--sessions", "1")
    assert code == 3
    assert "simulator cannot listen on 127.0.0.1:0" in capsys.readouterr().err


def test_the_listening_socket_binds_as_uvicorn_did():
    """`localhost` listens on IPv4 (a client given 127.0.0.1 reaches it), a host with a colon
    on IPv6, as uvicorn's own binding chose before the simulator bound its socket itself."""
    for host, family in (("localhost", socket.AF_INET), ("127.0.0.1", socket.AF_INET)):
        with sim_server.listen(host, 0) as sock:
            assert sock.family == family
    if socket.has_ipv6:
        try:
            sock = sim_server.listen("::1", 0)
        except OSError:  # no IPv6 loopback here
            return
        with sock:
            assert sock.family == socket.AF_INET6
