"""The API key never appears in any output: text and data that may hold it, redacted.

Input: text (or JSON-like data) for the user or a file, and the key (or None). Output: the same
with the key, and every beginning of it long enough to count, replaced by `[redacted]` (a server
may repeat the credential it got in its error, or in its reply; an excerpt may cut it).
"""

from __future__ import annotations

from typing import Any

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
