"""A real llama-server for tests.

`scripts/build-llama-server.sh` builds `llama-server` and fetches SmolLM2-135M-Instruct Q4_1
into ``${WL_CACHE:-~/.cache/workloadlang}`` and writes ``llama-server.env`` there. This module
finds the binary and the model (env vars ``WL_LLAMA_SERVER`` / ``WL_LLAMA_MODEL`` first, then
that env file), starts the server on a free loopback port, waits for ``/health``, and stops it.

conftest.py exposes it as the session-scoped fixture ``llama_server`` (a `LlamaServer`). When
the binary or model is missing the fixture skips, unless ``WL_REQUIRE_LLAMA=1`` (CI), where it
fails.

Also here: `stream_chat`, a minimal streaming chat client that records TTFT, usage, timings and
can close the stream after N content chunks (a client-side abort).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

ENV_SERVER = "WL_LLAMA_SERVER"
ENV_MODEL = "WL_LLAMA_MODEL"
ENV_REQUIRE = "WL_REQUIRE_LLAMA"
ENV_FILE_NAME = "llama-server.env"
MODEL_ALIAS = "smollm2"
N_CTX = 8192
HEALTH_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    return Path(os.environ.get("WL_CACHE") or Path.home() / ".cache" / "workloadlang")


def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def find_llama() -> tuple[Path | None, Path | None, str]:
    """Return (binary, model, reason). binary/model are None when not usable; reason says why."""
    file_vals = _read_env_file(cache_dir() / ENV_FILE_NAME)
    binary = os.environ.get(ENV_SERVER) or file_vals.get(ENV_SERVER)
    model = os.environ.get(ENV_MODEL) or file_vals.get(ENV_MODEL)
    hint = "run `bash scripts/build-llama-server.sh` (or set WL_LLAMA_SERVER / WL_LLAMA_MODEL)"
    if not binary:
        return None, None, f"llama-server not found: no {ENV_SERVER} and no {cache_dir() / ENV_FILE_NAME}; {hint}"
    bin_path = Path(binary)
    if not (bin_path.is_file() and os.access(bin_path, os.X_OK)):
        return None, None, f"llama-server binary {bin_path} is missing or not executable; {hint}"
    if not model:
        return bin_path, None, f"no model: {ENV_MODEL} unset; {hint}"
    model_path = Path(model)
    if not model_path.is_file():
        return bin_path, None, f"model {model_path} is missing; {hint}"
    return bin_path, model_path, ""


def llama_required() -> bool:
    return os.environ.get(ENV_REQUIRE, "").strip() not in ("", "0", "false", "no")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """A running llama-server. `base_url` ends in /v1 (for OpenAI-style clients)."""

    base_url: str
    root_url: str
    port: int
    log_path: Path
    binary: Path
    model: Path
    args: list[str]
    process: subprocess.Popen = field(repr=False)

    @property
    def model_id(self) -> str:
        return MODEL_ALIAS

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.process, timeout)


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def server_args(model: Path, port: int, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    return [
        "-m", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str(N_CTX),
        "-np", "1",
        "--metrics",
        "--no-webui",
        "-a", MODEL_ALIAS,
        "-t", "2",
        *extra,
    ]


def start_llama_server(
    binary: Path,
    model: Path,
    log_path: Path,
    extra_args: list[str] | tuple[str, ...] = (),
    timeout: float = HEALTH_TIMEOUT_S,
    attempts: int = 3,
) -> LlamaServer:
    """Start llama-server on a free 127.0.0.1 port and wait for GET /health == 200.

    Retries on a fresh port if the process dies early (e.g. the port was taken meanwhile).
    Raises RuntimeError with the log tail on failure.
    """
    last_err = ""
    for attempt in range(attempts):
        port = free_port()
        args = server_args(model, port, extra_args)
        path = log_path if attempt == 0 else log_path.with_name(f"{log_path.stem}.{attempt}{log_path.suffix}")
        log_fh = open(path, "wb")
        proc = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log_fh.close()  # the child holds its own descriptor
        root = f"http://127.0.0.1:{port}"
        server = LlamaServer(
            base_url=f"{root}/v1", root_url=root, port=port, log_path=path,
            binary=binary, model=model, args=args, process=proc,
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                try:
                    if client.get(f"{root}/health").status_code == 200:
                        return server
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        exited = proc.poll() is not None
        stop_process(proc)
        tail = "\n".join(server.log_text().splitlines()[-30:])
        last_err = (
            f"llama-server {'exited with ' + str(proc.returncode) if exited else f'not healthy after {timeout:.0f}s'}"
            f" (port {port}, log {path}):\n{tail}"
        )
        if not exited:  # a hang is not a port race: don't retry
            break
    raise RuntimeError(last_err)


def llama_server_session(tmp_path_factory: pytest.TempPathFactory,
                         extra_args: list[str] | tuple[str, ...] = ()) -> Iterator[LlamaServer]:
    """Generator behind the `llama_server` fixture (and others with `extra_args` for the server,
    which override `server_args`): skip/fail when missing, start, yield, stop."""
    binary, model, reason = find_llama()
    if binary is None or model is None:
        if llama_required():
            pytest.fail(f"{ENV_REQUIRE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    log_path = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    try:
        server = start_llama_server(binary, model, log_path, extra_args=extra_args)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


# ----------------------------------------------------------------------------- a tiny client


@dataclass
class StreamResult:
    status: int
    chunks: list[dict[str, Any]]
    content: str
    n_content_chunks: int
    usage: dict[str, Any] | None
    timings: dict[str, Any] | None
    finish_reason: str | None
    ttft_s: float | None  # request sent -> first chunk carrying non-empty delta content
    first_chunk_s: float | None  # request sent -> first SSE data chunk of any kind
    total_s: float
    aborted: bool  # the client closed the stream early
    error_body: str | None = None

    @property
    def cached_tokens(self) -> int | None:
        if not self.usage:
            return None
        details = self.usage.get("prompt_tokens_details") or {}
        return details.get("cached_tokens")

    @property
    def prompt_tokens(self) -> int | None:
        return (self.usage or {}).get("prompt_tokens")


def stream_chat(
    base_url: str,
    messages: list[dict[str, Any]],
    *,
    max_tokens: int = 16,
    close_after: int | None = None,
    extra: dict[str, Any] | None = None,
    timeout: float = 120.0,
    model: str = MODEL_ALIAS,
) -> StreamResult:
    """POST /chat/completions with stream=true and include_usage.

    close_after=N closes the connection right after the N-th chunk with non-empty content.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if extra:
        body.update(extra)
    chunks: list[dict[str, Any]] = []
    content: list[str] = []
    usage = timings = finish = None
    ttft = first = None
    n_content = 0
    aborted = False
    t0 = time.perf_counter()
    with httpx.Client(timeout=timeout) as client:
        with client.stream("POST", f"{base_url}/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                err = resp.read().decode(errors="replace")
                return StreamResult(resp.status_code, [], "", 0, None, None, None, None, None,
                                    time.perf_counter() - t0, False, err)
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter() - t0
                chunk = json.loads(data)
                chunks.append(chunk)
                if first is None:
                    first = now
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("timings"):
                    timings = chunk["timings"]
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        if ttft is None:
                            ttft = now
                        content.append(piece)
                        n_content += 1
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                if close_after is not None and n_content >= close_after:
                    aborted = True
                    break  # leaving the context managers closes the connection
    return StreamResult(200, chunks, "".join(content), n_content, usage, timings, finish, ttft, first,
                        time.perf_counter() - t0, aborted)


def filler_text(seed: int, n_words: int) -> str:
    """Deterministic pseudo-random English-ish text (about 1.1 tokens a word for SmolLM2)."""
    import random

    words = (
        "river stone lantern copper meadow signal harbor orbit velvet thunder quiet ledger "
        "pepper willow canyon marble falcon ember violet garden anchor prism cedar tunnel "
        "maple comet silver basket forest engine glacier saddle pillow rocket tiger window "
        "ribbon candle spiral meteor island pocket puzzle shadow bridge lemon rabbit castle"
    ).split()
    rng = random.Random(seed)
    out = []
    for i in range(n_words):
        out.append(rng.choice(words))
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out)
