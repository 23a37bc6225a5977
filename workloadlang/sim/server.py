"""Serving the simulator with uvicorn: blocking (`serve`) or in a background thread
(`start_in_thread`, for tests and `wl run --sim`).

Input: a `SimConfig`, host and port (0 = pick a free port). Output: a running HTTP server.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from time import perf_counter

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .app import create_app
from .config import SimConfig
from .engine import Simulator


class StampedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus the time each request's first bytes were read from the
    socket, in the ASGI scope as `wl.received` (perf_counter s). The simulator's TTFT starts there,
    so time spent queued behind other requests in the server's own event loop (parsing, routing,
    reading the body) is the server's, not charged to the client as network time."""

    _wl_read_at = 0.0

    def data_received(self, data: bytes) -> None:
        self._wl_read_at = perf_counter()
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["wl.received"] = self._wl_read_at  # type: ignore[typeddict-unknown-key]


def _uvicorn_config(config: SimConfig, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(config), host=host, port=port, log_config=None, access_log=False,
        lifespan="on", ws="none", timeout_keep_alive=30, http=StampedHttpProtocol,
    )


def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until interrupted (SIGINT / SIGTERM). Blocking; library code, so it never prints."""
    uvicorn.Server(_uvicorn_config(config, host, port)).run()


class SimHandle:
    """A simulator running in a background thread; a context manager that stops it on exit.

    `base_url` is the OpenAI base (`http://host:port/v1`), `root_url` the server root.
    `sim` is the live `Simulator` (only safe to read for diagnostics; it belongs to the server's
    event loop thread).
    """

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str,
                 port: int, config: SimConfig) -> None:
        self._server, self._thread = server, thread
        self.host, self.port, self.config = host, port, config
        netloc = f"[{host}]" if ":" in host else host
        self.root_url = f"http://{netloc}:{port}"
        self.base_url = f"{self.root_url}/v1"

    @property
    def sim(self) -> Simulator:
        return self._server.config.app.state.sim

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit and wait for its thread (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> "SimHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bound_port(server: uvicorn.Server) -> Optional[int]:
    for srv in getattr(server, "servers", []) or []:
        for sock in srv.sockets or []:
            return sock.getsockname()[1]
    return None


def start_in_thread(config: SimConfig, host: str = "127.0.0.1", port: int = 0,
                    timeout: float = 15.0) -> SimHandle:
    """Start a simulator in a daemon thread with its own event loop and wait until it accepts
    connections. Output: a SimHandle with the real port (port 0 -> the OS-chosen free port).
    Raises RuntimeError when the server does not start within `timeout` seconds."""
    server = uvicorn.Server(_uvicorn_config(config, host, port))
    thread = threading.Thread(target=server.run, name="wl-sim", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"simulator failed to start on {host}:{port}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"simulator did not start within {timeout} s")
        time.sleep(0.005)
    real_port = _bound_port(server)
    if real_port is None:
        server.should_exit = True
        raise RuntimeError("simulator started but its listening port is unknown")
    return SimHandle(server, thread, host, real_port, config)
