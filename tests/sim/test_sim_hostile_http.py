"""The simulator as a server, against hostile clients: bodies it cannot use are 4xx answers,
never a 500 with a traceback, and a client cannot hold a connection by promising more body than
it sends. A real uvicorn server on loopback (the app built with a short body timeout).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from workloadlang.sim.app import MIN_BODY_BYTES, create_app
from workloadlang.sim.config import SimConfig

IDLE_S = 0.5
MESSAGES = '"messages":[{"role":"user","content":"hi"}]'


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a simulator whose body timeout is `IDLE_S`."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(SimConfig(prefill_us_per_token=0, decode_us_per_token=0),
                                       body_idle_s=IDLE_S),
                            log_level="critical", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.mark.parametrize(("body", "says"), [
    ("{" + MESSAGES + ',"max_tokens":1e400}', "out of range"),
    ("{" + MESSAGES + ',"max_tokens":NaN}', "NaN is not a JSON number"),
    ("{" + MESSAGES + ',"max_tokens":-Infinity}', "-Infinity is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ('{"messages":[{"role":"user","content":' + "[" * 70 + "]" * 70 + "}]}", "64 levels"),
    ("{" + MESSAGES + ',"max_tokens":3', "not valid JSON"),
])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_a_body_it_cannot_use_is_a_400(base: str, path: str, body: str, says: str):
    r = httpx.post(base + path, content=body.encode(), timeout=10)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]


def test_a_declared_body_over_the_limit_is_refused_unread(base: str):
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\n"
                  + f"Content-Length: {MIN_BODY_BYTES + 1}\r\n\r\n".encode())
        head = s.recv(4096).decode()
    assert head.startswith("HTTP/1.1 413"), head


def test_a_chunked_body_over_the_limit_is_refused(base: str):
    def chunks() -> Iterator[bytes]:
        yield b'{"messages":[{"role":"user","content":"'
        for _ in range(MIN_BODY_BYTES // (1 << 20) + 1):
            yield b"a" * (1 << 20)
        yield b'"}]}'

    r = httpx.post(base + "/v1/chat/completions", content=chunks(), timeout=30)
    assert r.status_code == 413


def test_a_body_shorter_than_its_length_does_not_hold_the_connection(base: str):
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\"")
        head = s.recv(4096).decode()
    assert head.startswith("HTTP/1.1 408"), head
    assert IDLE_S <= time.monotonic() - start < IDLE_S + 5


def test_a_good_request_still_streams(base: str):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=10) as r:
        text = "".join(r.iter_text())
    assert r.status_code == 200 and text.rstrip().endswith("data: [DONE]")
    assert json.loads(text.split("\n\n")[1][len("data: "):])["choices"][0]["delta"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_a_client_gone_before_its_body_ends_leaves_no_traceback(path: str, caplog):
    """`Content-Length: 1000`, 2 bytes, then the connection closed: the server logged a
    `ClientDisconnect` traceback ("Exception in ASGI application"). It is a refused request
    whose answer goes nowhere; the server goes on answering."""
    import logging
    from urllib.parse import urlsplit

    from workloadlang.sim import start_in_thread

    caplog.set_level(logging.DEBUG)
    with start_in_thread(SimConfig(prefill_us_per_token=0, decode_us_per_token=0)) as sim:
        with socket.create_connection(("127.0.0.1", urlsplit(sim.root_url).port), timeout=5) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 1000\r\n\r\n{\"".encode())
            time.sleep(0.2)  # the server has read the 2 bytes and waits for the rest
        time.sleep(0.5)  # it sees the close
        assert httpx.get(sim.root_url + "/health", timeout=5).status_code == 200
        if path == "/v1/chat/completions":
            state = httpx.get(sim.root_url + "/sim/state", timeout=5).json()
            assert state["counters"]["rejected"] == 1
    logged = "\n".join(f"{r.name}: {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "ClientDisconnect" not in logged and "Exception in ASGI" not in logged, logged
