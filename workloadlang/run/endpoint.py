"""Where and what to send: the endpoint, one chat request, and its bytes.

Input: the engine's base URL (and model, API key), a planned request's messages and options.
Output: `Endpoint`, `ChatRequest`, and the request as the wire client sends it (`outgoing`):
its HTTP head made once, its JSON body as parts, a message given already encoded (bytes) used
as it is — a conversation re-sent with one more turn encodes only the new turn, and the body is
copied once, into the socket.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from workloadlang.wire import Outgoing, request_head, target_of


def dumps(obj: Any) -> bytes:
    """Output: compact UTF-8 JSON (orjson; Python's json for integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def dumps_kept(obj: Any) -> bytes:
    """Output: `dumps(obj)` in a bytes object of its own size, for bytes kept for long (each
    message of a conversation, encoded once): orjson's output keeps the whole buffer it was
    written into — with tracemalloc, a 3 KB message held 32 KB and a 100 KB one 1 MB."""
    return bytes(memoryview(dumps(obj)))


_FORBIDDEN_HEADERS = ("x-conversation-id",)  # makes llama.cpp streams resumable: never send it


class Endpoint(BaseModel):
    """Where and how to talk to the engine.

    `base_url` is the OpenAI base (`…/v1`, trailing `/` stripped); `root_url` is derived from it by
    removing only a trailing `/v1` (engine-native routes such as `/metrics`, `/tokenize`, `/props`
    live there). `api_key` is a secret: it never appears in repr, str or JSON dumps.
    `cached_zero_when_absent` is the user's declaration that the engine leaves the cached field out
    when it is 0 (vLLM `--enable-prompt-tokens-details`, SGLang `--enable-cache-report`)."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    root_url: str = ""
    model: str
    api_key: SecretStr | None = None
    cached_zero_when_absent: bool = False
    # how long an answer may send nothing once its first token is in (None: no limit): a
    # stalled stream is cut then (`idle`), long before the request's total deadline
    idle_timeout_s: float | None = Field(default=60.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _derive_urls(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("base_url"), str):
            data = dict(data)
            data["base_url"] = data["base_url"].rstrip("/")
            if not data.get("root_url"):
                data["root_url"] = root_of(data["base_url"])
        return data

    @property
    def chat_url(self) -> str:
        """Output: the chat-completions URL."""
        return self.base_url + "/chat/completions"

    def auth_headers(self) -> dict[str, str]:
        """Output: `{"Authorization": "Bearer …"}` when a key is set, else `{}`."""
        return auth_headers(self.api_key)


def root_of(base_url: str) -> str:
    """Input: an OpenAI base URL. Output: the server root: trailing `/` stripped and only a
    trailing `/v1` removed (never every occurrence of `/v1`)."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def auth_headers(api_key: SecretStr | str | None) -> dict[str, str]:
    """Input: an API key (secret, plain or None). Output: the Authorization header dict."""
    if api_key is None:
        return {}
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    return {"Authorization": f"Bearer {key}"} if key else {}


class ChatRequest(BaseModel):
    """One chat request as sent. `messages` are chat messages, each a dict or its JSON encoding
    already made (bytes, used as they are). `options` are merged into the body as-is (None
    values left out); `abort_after` closes the stream after that many streamed token events;
    `deadline_s` is the TOTAL time allowed for the whole exchange; `budget_cut`: it is what was
    left of the run's time budget, less than the workload's timeout (a request cut there was
    stopped by the run, not by a slow engine, and its error says so)."""

    model_config = ConfigDict(frozen=True)

    id: str
    messages: list[dict[str, Any] | bytes]
    max_tokens: int = Field(ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    abort_after: int | None = Field(default=None, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)
    deadline_s: float = Field(default=600.0, gt=0)
    budget_cut: bool = False


def build_body(endpoint: Endpoint, req: ChatRequest) -> dict[str, Any]:
    """Input: endpoint and request. Output: the JSON body: model, messages, max_tokens,
    `stream: true`, `stream_options.include_usage`, then `req.options` (None values left out)."""
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": req.messages,
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for key, value in req.options.items():
        if value is not None:
            body[key] = value
    return body


def encode_body(endpoint: Endpoint, req: ChatRequest) -> bytes:
    """Input: endpoint and request. Output: `build_body` as compact JSON, byte for byte what
    `dumps(build_body(...))` gives for dict messages (see `body_parts`)."""
    return b"".join(body_parts(endpoint, req))


def body_parts(endpoint: Endpoint, req: ChatRequest) -> list[bytes]:
    """Input: endpoint and request. Output: the pieces of `encode_body`, in order: a message
    given as bytes is a piece as it is (a conversation re-sent with one more turn encodes only
    the new turn), so that the body, or the body behind its head, is copied once."""
    body = build_body(endpoint, req)
    parts = [dumps({"model": body.pop("model")})[:-1], b',"messages":[']
    for m in body.pop("messages"):
        parts.append(m if isinstance(m, bytes) else dumps(m))
        parts.append(b",")
    if len(parts) > 2:
        parts.pop()
    parts.append(b"],")
    parts.append(dumps(body)[1:])
    return parts


def build_headers(endpoint: Endpoint, req: ChatRequest) -> dict[str, str]:
    """Input: endpoint and request. Output: request headers (JSON content type, bearer auth when a
    key is set, then `req.headers`), never `X-Conversation-Id`."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    headers.update(endpoint.auth_headers())
    for name, value in req.headers.items():
        if name.lower() not in _FORBIDDEN_HEADERS:
            headers[name] = value
    return headers



def head_of(endpoint: Endpoint, req: ChatRequest) -> bytes:
    """Output: the HTTP head `req` is sent with, up to `Content-Length` (which the body decides:
    `Outgoing.payload`). Raises ValueError for what cannot be sent (a URL that is no http(s)
    URL, a header value with a line break or that is not ASCII)."""
    return request_head("POST", target_of(endpoint.chat_url), build_headers(endpoint, req).items())


def outgoing(endpoint: Endpoint, req: ChatRequest, parts: list[bytes] | None = None,
             head: bytes | None = None) -> Outgoing:
    """Output: `req` as the wire client sends it: its head (`head`, made ahead, or now) and its
    body's parts (`parts`, made ahead, or `body_parts` now); its timeouts are its total deadline,
    so that none cuts a long prefill first. Raises ValueError as `head_of` does."""
    return Outgoing("POST", endpoint.chat_url, (), body_parts(endpoint, req) if parts is None
                    else parts, req.deadline_s, head if head is not None else head_of(endpoint, req))
