"""The API key never appears in any output: text and data that may hold it, redacted.

Input: text (or JSON-like data) for the user or a file, and the key (or None). Output: the same
with the key, every beginning of it long enough to count and every run of `_RUN` or more of its
characters replaced by `[redacted]` (a server may repeat the credential it got in its error,
or in its reply, or a part of it; an excerpt may cut it).
"""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"


_FRAGMENT = 6  # the shortest beginning of a key that counts as part of it
_RUN = 8  # the shortest run of a key's characters, anywhere in it, that counts as part of it
_PIECE = 4  # runs are found by the key's pieces of this length at multiples of it (see `runs`)


def redact(text: str, secret: str | None) -> str:
    """Input: text for the user or a file, and the API key (or None). Output: the text with the
    key replaced by `[redacted]` (a server may repeat the credential it got in its error, or
    in its reply), and so is every beginning of the key at least `_FRAGMENT` characters long
    and every run of at least `_RUN` of its characters (its tail, its middle), wherever it
    stands (an excerpt cut it, or the engine repeated a part of it)."""
    if not secret or not text:
        return text
    text = text.replace(secret, REDACTED)
    spans = merged(heads(text, secret) + runs(text, secret))
    if not spans:
        return text
    out, at = [], 0
    for start, end in spans:
        out += [text[at:start], REDACTED]
        at = end
    out.append(text[at:])
    return "".join(out)


def heads(text: str, secret: str) -> list[tuple[int, int]]:
    """The spans of `text` that are beginnings of the key at least `_FRAGMENT` long."""
    if len(secret) < _FRAGMENT:
        return []
    head, out = secret[:_FRAGMENT], []
    found = text.find(head)
    while found >= 0:
        end = found + _FRAGMENT
        while end < len(text) and end - found < len(secret) and text[end] == secret[end - found]:
            end += 1
        out.append((found, end))
        found = text.find(head, end)
    return out


def runs(text: str, secret: str) -> list[tuple[int, int]]:
    """The spans of `text` that are runs of at least `_RUN` consecutive characters of the key.
    Such a run holds one of the key's `_PIECE`-character pieces that start at a multiple of
    `_PIECE` (`_RUN` >= 2 * `_PIECE` - 1): each piece is looked for in the text (a search in
    C per piece, not per position), and where it stands the match with the key around it is
    grown both ways."""
    out = []
    for q in range(0, len(secret) - _PIECE + 1, _PIECE):
        piece = secret[q:q + _PIECE]
        at = text.find(piece)
        while at >= 0:
            start, i = at, q
            while start > 0 and i > 0 and text[start - 1] == secret[i - 1]:
                start, i = start - 1, i - 1
            end, j = at + _PIECE, q + _PIECE
            while end < len(text) and j < len(secret) and text[end] == secret[j]:
                end, j = end + 1, j + 1
            if end - start >= _RUN:
                out.append((start, end))
            at = text.find(piece, at + 1)
    return out


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` in order, those that overlap or touch made one."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


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
    """Output: whether `text` (bytes: UTF-8) holds the key or a part of it long enough to count
    (a beginning of `_FRAGMENT` characters, a run of `_RUN` anywhere): then it needs `redact`."""
    if not secret:
        return False
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return secret in text or bool(heads(text, secret)) or bool(runs(text, secret))
