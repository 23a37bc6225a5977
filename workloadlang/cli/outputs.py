"""Where `wl run` writes: the records as they complete, the summary and the report, each at the
path asked for or, when that cannot be written, at a fallback path that stderr names.

Input: paths from the command line, records and events (`Tee`, the run's sink), the `Results`.
Output: files, and for each a `Delivery` saying where it went. Nothing measured is lost: a write
that fails mid-run moves the records to a fallback file, the lines written so far copied first.
The API key never reaches a file: what came from the engine and holds it is redacted first.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from workloadlang.redact import mentions, redact_value
from workloadlang.results import Record, Results, Sink


class Delivery(NamedTuple):
    """Where a file asked for by `flag` (`--output`, `--records`, `--report`) ended up:
    `written` is the path (a fallback when `error` says why the asked path failed; None when
    no fallback could be written either)."""

    flag: str
    asked: str
    written: str | None
    error: str | None = None


FALLBACK_NAMES = {"--output": "results.json", "--records": "records.jsonl",
                  "--report": "report.html"}


def fallback_paths(flag: str) -> list[str]:
    """Where a file goes when its asked path cannot be written: a fresh file in the temp
    directory, else in the working directory (`wl-fallback-1a2b3c-results.json`)."""
    name = f"wl-fallback-{secrets.token_hex(3)}-{FALLBACK_NAMES.get(flag, 'out')}"
    return [os.path.join(folder, name) for folder in (tempfile.gettempdir(), os.getcwd())]


def deliver(flag: str, asked: str, write: Callable[[str], Any]) -> Delivery:
    """`write(path)` at the asked path, else at the first fallback that takes it. Never raises
    for a path problem (OSError); the `Delivery` says what happened."""
    try:
        write(asked)
        return Delivery(flag, asked, asked)
    except OSError as exc:
        error = exc.strerror or str(exc)
    for path in fallback_paths(flag):
        try:
            write(path)
            return Delivery(flag, asked, path, error)
        except OSError:
            continue
    return Delivery(flag, asked, None, error)


class JsonlWriter:
    """Appends one JSON object per line and flushes it at once. A write that fails (a full
    disk, a path gone) moves the file to a fallback (`fallback_paths`: the lines written so
    far copied first) and goes on there; it never raises, `delivery` says where the lines are."""

    def __init__(self, path: str | Path | None):
        self.path = str(path) if path else None
        self.fh: IO[bytes] | None = None
        self.good = 0  # bytes of whole lines written and flushed
        self.delivery = Delivery("--records", self.path, self.path) if self.path else None
        if self.path:
            try:
                self.fh = open(self.path, "wb")
            except OSError as exc:
                self._fail_over(exc, b"")

    def write(self, obj: dict[str, Any]) -> None:
        if self.fh is None:
            return
        line = orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"
        try:
            self.fh.write(line)
            self.fh.flush()
        except OSError as exc:
            self._fail_over(exc, line)
            return
        self.good += len(line)

    def _fail_over(self, exc: OSError, pending: bytes) -> None:
        """Continue in a fallback file: what was written whole so far, then `pending`."""
        assert self.path is not None
        error = exc.strerror or str(exc)
        self._close_quietly()
        done = self._copied_so_far()
        for path in fallback_paths("--records"):
            try:
                fh = open(path, "wb")
                fh.write(done + pending)
                fh.flush()
            except OSError:
                continue
            self.fh, self.good = fh, len(done) + len(pending)
            self.delivery = Delivery("--records", self.path, path, error)
            return
        self.delivery = Delivery("--records", self.path, None, error)

    def _copied_so_far(self) -> bytes:
        """The whole lines already in the asked file (only a regular file is read back)."""
        if not self.good or not self.path or not os.path.isfile(self.path):
            return b""
        try:
            with open(self.path, "rb") as fh:
                return fh.read(self.good)
        except OSError:
            return b""

    def _close_quietly(self) -> None:
        fh, self.fh = self.fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.fh is None:
            return
        try:
            self.fh.close()
        except OSError as exc:  # a buffered byte refused at the end: keep what was flushed
            self.fh = None
            self._fail_over(exc, b"")
            self._close_quietly()
        self.fh = None


class Tee:
    """The executor's sink: the JSONL file first, then the person watching. With the API key
    (`secret`), whatever came from the engine and holds it (a reply that echoes it, a model
    id) is redacted before either sees it."""

    def __init__(self, writer: JsonlWriter, view: Sink, secret: str | None = None):
        self.writer, self.view, self.secret = writer, view, secret

    def record(self, rec: Record) -> None:
        data = rec.model_dump(mode="json")
        if self.secret and mentions(orjson.dumps(data), self.secret):
            data = redact_value(data, self.secret)
            rec = Record.model_validate(data)
        self.writer.write(data)
        self.view.record(rec)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        data = redact_value(data, self.secret)
        self.writer.write({"type": kind, **data})
        self.view.event(kind, data)


def redacted(results: Results, secret: str | None) -> Results:
    """`results` with the API key redacted from every string in it (records, engine, notes):
    what is written and printed. The same object when the key is nowhere in it."""
    if not secret:
        return results
    data = results.model_dump(mode="json")
    if not mentions(orjson.dumps(data), secret):
        return results
    return Results.model_validate(redact_value(data, secret))
