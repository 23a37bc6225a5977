"""Errors of the runner's requests and of its engine.

* `ErrorInfo` is the data attached to a request `Outcome` (a request never raises for transport,
  HTTP or stream problems; the problem is recorded instead); its kinds are the results'
  (`results.ErrorKind`).
* `EndpointError` is raised by discovery and the tokenizer when the endpoint cannot be used at all
  (unreachable, HTTP error, unusable payload, no model). Its `str()` is one clear line.
* `engine_message(body)` pulls the engine's own error message out of an error body.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from workloadlang.results import ErrorKind

EXCERPT_CHARS = 300


class ErrorInfo(BaseModel):
    """What went wrong with one request: `kind`, a one-line `message`, the HTTP `status` when there
    was a response, and a short `body` excerpt (the engine's error JSON, or the bad chunk)."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    message: str
    status: int | None = None
    body: str | None = None


EndpointErrorKind = Literal["unreachable", "http", "bad_payload", "no_model"]


class EndpointError(Exception):
    """The endpoint cannot be used. `kind` is one of unreachable / http / bad_payload / no_model,
    `url` the URL that failed, `status` the HTTP status when there was one; `str(err)` is one
    line meant for the user."""

    def __init__(
        self, kind: EndpointErrorKind, message: str, *, url: str = "", status: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind: EndpointErrorKind = kind
        self.message = message
        self.url = url
        self.status = status

    def __str__(self) -> str:
        return self.message


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    """Input: a body (text or bytes). Output: at most `limit` characters on one line, with `…`
    appended when it was cut."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def message_from_json(obj: Any) -> str | None:
    """Input: a decoded error payload. Output: the engine's message, or None.

    Understands the OpenAI/llama.cpp/vLLM shape `{"error": {"message": ...}}`, `{"error": "..."}`,
    vLLM's `{"object": "error", "message": ...}` and FastAPI's `{"detail": ...}`."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or err.get("detail")
        if msg:
            kind = err.get("type") or err.get("code")
            return f"{msg} ({kind})" if isinstance(kind, str) and kind else str(msg)
    elif isinstance(err, str) and err:
        return err
    for key in ("message", "detail"):
        val = obj.get(key)
        if val:
            return val if isinstance(val, str) else json.dumps(val)
    return None


def engine_message(body: str | bytes) -> str:
    """Input: an error response body. Output: the engine's message (from JSON when it parses),
    otherwise an excerpt of the raw body, or `(empty body)`."""
    try:
        msg = message_from_json(json.loads(body))
    except ValueError:
        msg = None
    if msg:
        return excerpt(msg, 200)
    return excerpt(body, 200) or "(empty body)"
