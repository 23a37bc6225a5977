"""Errors of the runner's transport layer.

* `ErrorInfo` is the data attached to a request `Outcome` (a request never raises for transport,
  HTTP or stream problems; the problem is recorded instead).
* `EndpointError` is raised by discovery and the tokenizer when the endpoint cannot be used at all
  (unreachable, HTTP error, unusable payload, no model). Its `str()` is one clear line.
* `engine_message(body)` pulls the engine's own error message out of an error body.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ErrorKind = Literal["http", "connect", "timeout", "stream_cut", "malformed", "engine", "early_stop",
                    "overrun", "idle", "interrupted"]
"""Why a request did not complete normally:

* `http`: the server answered with a status >= 400;
* `connect`: no response at all (refused, DNS, reset before the headers);
* `timeout`: the request's total deadline passed;
* `stream_cut`: the stream ended (or broke) without `[DONE]` and without a finish_reason;
* `malformed`: a chunk was not valid JSON (later chunks were still read);
* `engine`: the engine reported an error inside the stream (`{"error": ...}` or `event: error`);
* `early_stop`: an abort was planned but the stream finished before the abort target;
* `overrun`: the answer went past its bounds (many more token events than `max_tokens`, more
  bytes than such an answer can hold, an SSE line without end): the rest was not read;
* `idle`: the answer sent nothing for the idle timeout after its first token;
* `interrupted`: the run was stopped (Ctrl-C, SIGTERM) while the request was in flight.
"""

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


REDACTED = "[redacted]"


_FRAGMENT = 6  # the shortest beginning of a key that counts as part of it


def redact(text: str, secret: str | None) -> str:
    """Input: text for the user or a file, and the API key (or None). Output: the text with the
    key replaced by `[redacted]` (a server may repeat the credential it got in its error, or
    in its reply), and so is every beginning of the key at least `_FRAGMENT` characters long,
    wherever it stands (an excerpt cut it, or the engine repeated a part of it)."""
    if not secret or not text:
        return text
    text = text.replace(secret, REDACTED)
    head = secret[:_FRAGMENT]
    if len(secret) < _FRAGMENT or head not in text:
        return text
    out, at = [], 0
    while True:
        found = text.find(head, at)
        if found < 0:
            break
        end = found + _FRAGMENT
        while end < len(text) and end - found < len(secret) and text[end] == secret[end - found]:
            end += 1
        out += [text[at:found], REDACTED]
        at = end
    out.append(text[at:])
    return "".join(out)


def redact_value(value: Any, secret: str | None) -> Any:
    """Input: JSON-like data (dicts, lists, strings, numbers) and the API key. Output: the same
    data with `redact` applied to every string in it, keys included (a copy where anything
    changed)."""
    if not secret:
        return value
    if isinstance(value, str):
        return redact(value, secret)
    if isinstance(value, dict):
        return {redact_value(k, secret): redact_value(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, secret) for v in value]
    return value


def mentions(text: str | bytes, secret: str | None) -> bool:
    """Output: whether `text` holds the key or a beginning of it long enough to count
    (`_FRAGMENT` characters): then it needs `redact`."""
    if not secret:
        return False
    head = secret[:_FRAGMENT]
    return (head.encode() in text) if isinstance(text, bytes) else head in text


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
