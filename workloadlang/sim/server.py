"""Serving the simulator with uvicorn: blocking (`serve`), in a child process
(`start_in_process`, for `wl run --sim`) or in a background thread (`start_in_thread`, for
tests that look at the simulator's state).

Input: a `SimConfig`, host and port (0 = pick a free port). Output: a running HTTP server.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from time import perf_counter

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .. import stamps
from .app import create_app
from .config import SimConfig
from .engine import Simulator

_ARRIVALS: dict[int, float] = {}  # socket fd -> arrival stamp of its last read (loop thread)


class StampedSocket(socket.socket):
    """A listening socket whose accepted connections remember when the bytes of each read
    reached the socket: the kernel's receive timestamp (`stamps`), else the time of the read.

    asyncio's socket transport reads with `recv` and hands the bytes to the protocol at once
    (same thread, same call), so `StampedHttpProtocol.data_received` finds the stamp of exactly
    the bytes it is given in `_ARRIVALS` under the socket's fd."""

    def accept(self) -> tuple[socket.socket, object]:
        fd, addr = self._accept()  # type: ignore[attr-defined]
        conn = _StampedConnection(self.family, self.type, self.proto, fileno=fd)
        # asyncio turns Nagle off only for IPPROTO_TCP sockets; say so even if the listening
        # socket was made without it (a 40 ms delayed-ACK stall per streamed chunk otherwise)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.stamped = stamps.enable(conn)
        return conn, addr


class _StampedConnection(socket.socket):
    stamped = False

    def recv(self, size: int, flags: int = 0) -> bytes:
        if not self.stamped:
            data = super().recv(size, flags)
            _ARRIVALS[self.fileno()] = perf_counter()
            return data
        data, anc, _, _ = self.recvmsg(size, stamps.CMSG_SPACE, flags)
        _ARRIVALS[self.fileno()] = stamps.arrival(anc, perf_counter)
        return data


class StampedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus when each request's first bytes reached the server, in
    the ASGI scope as `wl.received` (perf_counter s): the kernel's stamp when the connection
    came from a `StampedSocket`, else the time they were read. The simulator's TTFT starts
    there, so the time a request waits in the server's socket and event loop (behind other
    requests, parsing, routing, reading the body) is the server's, not charged to the client."""

    _wl_read_at = 0.0
    _wl_fd = -1

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        self._wl_fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        self._wl_read_at = _ARRIVALS.pop(self._wl_fd, 0.0) or perf_counter()
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["wl.received"] = self._wl_read_at  # type: ignore[typeddict-unknown-key]


def _uvicorn_config(config: SimConfig, host: str, port: int) -> uvicorn.Config:
    # loop="asyncio": uvloop reads sockets in C, past `StampedSocket`
    return uvicorn.Config(
        create_app(config), host=host, port=port, log_config=None, access_log=False,
        lifespan="on", ws="none", timeout_keep_alive=30, http=StampedHttpProtocol,
        loop="asyncio",
    )


def listen(host: str, port: int) -> socket.socket:
    """Output: a `StampedSocket` bound to (host, port) and listening (port 0: a free port). The
    address family is chosen as uvicorn chooses it: IPv6 when the host has a colon."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = StampedSocket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until interrupted (SIGINT / SIGTERM). Blocking; library code, so it never prints.
    Raises OSError when (host, port) cannot be listened on."""
    sock = listen(host, port)
    try:
        uvicorn.Server(_uvicorn_config(config, host, port)).run(sockets=[sock])
    finally:
        sock.close()


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
        app = self._server.config.app
        assert isinstance(app, Starlette)  # create_app's
        return app.state.sim

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit and wait for its thread (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bound_port(server: uvicorn.Server) -> int | None:
    for srv in getattr(server, "servers", []) or []:
        for sock in srv.sockets or []:
            return sock.getsockname()[1]
    return None


def start_in_thread(config: SimConfig, host: str = "127.0.0.1", port: int = 0,
                    timeout: float = 15.0) -> SimHandle:
    """Start a simulator in a daemon thread with its own event loop and wait until it accepts
    connections. Output: a SimHandle with the real port (port 0 -> the OS-chosen free port).
    Raises RuntimeError when the server cannot listen or does not start within `timeout` s."""
    try:
        sock = listen(host, port)
    except OSError as exc:
        raise RuntimeError(f"simulator cannot listen on {host}:{port}: {exc}") from None
    server = uvicorn.Server(_uvicorn_config(config, host, port))

    def run() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    thread = threading.Thread(target=run, name="wl-sim", daemon=True)
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


class SimProcess:
    """A simulator serving from a child process (`start_in_process`); a context manager that
    stops it on exit. `base_url` is the OpenAI base (`http://host:port/v1`), `root_url` the
    server root."""

    def __init__(self, proc: subprocess.Popen, host: str, port: int, config: SimConfig) -> None:
        self._proc = proc
        self.host, self.port, self.config = host, port, config
        netloc = f"[{host}]" if ":" in host else host
        self.root_url = f"http://{netloc}:{port}"
        self.base_url = f"{self.root_url}/v1"

    def stop(self, timeout: float = 10.0) -> None:
        """Close the child's stdin (it stops serving at its end) and wait for it; kill it if it
        has not exited within `timeout` s (idempotent)."""
        proc = self._proc
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_process(config: SimConfig, host: str = "127.0.0.1", port: int = 0,
                     timeout: float = 15.0) -> SimProcess:
    """Start a simulator in a child Python process and wait until it serves. The client in this
    process then shares no interpreter lock, event loop or socket reader with the server it
    measures, as with a real engine. This process opens the listening socket (port 0: a free
    one) and hands it over; the child gets its configuration on stdin and serves until its
    stdin ends (`SimProcess.stop`, or this process exiting in any way), in its own session (a
    Ctrl-C at the terminal reaches this process, which stops it once it has written what it
    measured). Output: a `SimProcess`. Raises RuntimeError when the socket cannot be listened
    on or the child does not start within `timeout` s."""
    try:
        sock = listen(host, port)
    except OSError as exc:
        raise RuntimeError(f"simulator cannot listen on {host}:{port}: {exc}") from None
    real_port = sock.getsockname()[1]
    ready_r, ready_w = os.pipe()
    # the child imports what this process would; this package's own directory comes last, for a
    # run from a checkout that is not installed (never ahead of the standard library)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = ("import sys; sys.path.append(sys.argv.pop(1)); "
             "from workloadlang.sim.__main__ import main; sys.exit(main())")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", child, package_root, "--listen-fd", str(sock.fileno()),
             "--ready-fd", str(ready_w)],
            stdin=subprocess.PIPE, pass_fds=(sock.fileno(), ready_w), start_new_session=True)
    except OSError as exc:
        os.close(ready_r)
        raise RuntimeError(f"simulator cannot start: {exc}") from None
    finally:
        os.close(ready_w)
        sock.close()  # the child has its own copies
    handle = SimProcess(proc, host, real_port, config)
    try:
        assert proc.stdin is not None
        proc.stdin.write(config.model_dump_json().encode() + b"\n")
        proc.stdin.flush()
        readable, _, _ = select.select([ready_r], [], [], timeout)
        ready = bool(readable) and os.read(ready_r, 1) == b"1"
    except OSError:
        ready = False
    finally:
        os.close(ready_r)
    if not ready:
        handle.stop(timeout=1.0)
        raise RuntimeError(f"simulator did not start on {host}:{real_port} within {timeout} s"
                           f" (exit status {proc.returncode})")
    return handle


def serve_inherited(listen_fd: int, ready_fd: int) -> None:
    """The child's half of `start_in_process`: read the `SimConfig` (JSON, one line) from stdin,
    serve on the inherited listening socket `listen_fd`, write b"1" to `ready_fd` once serving,
    and exit at once when stdin reaches its end: the parent has finished with it (or is gone),
    the simulator keeps nothing to write, and uvicorn's graceful shutdown (a 0.1 s tick and a
    0.1 s pause) would only make every `wl run --sim` wait for it."""
    config = SimConfig.model_validate_json(sys.stdin.buffer.readline())
    sock = StampedSocket(fileno=listen_fd)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(_uvicorn_config(config, host, port))

    def watch() -> None:
        while not server.started:
            time.sleep(0.005)
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        sys.stdin.buffer.read()  # until the parent closes it, or exits
        sys.stderr.flush()
        os._exit(0)

    threading.Thread(target=watch, name="wl-sim-parent", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
