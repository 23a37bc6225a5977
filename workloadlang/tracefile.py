"""Request traces: a Mooncake JSONL file or a workloadlang trace JSONL file, read and checked.

Input: a path, what to take of it (`Selection`: offset, limit, sample) and the planner's
`Limits`. Output: a `Trace`: its records in send order (send time, session, prompt and output
sizes, the ids of the prompt's blocks), the file's format, its sha256 and record count.
Errors: `TraceError` (a message and the line it is about) for anything a record cannot be:
the caller turns it into a diagnostic. Memory stays bounded whatever the file holds: a line
longer than `MAX_LINE` bytes, more records than the request limit or a prompt larger than the
request token limit is refused, not read.

Formats (docs/traces.md):

- Mooncake (FAST'25 traces): one object a line, `timestamp` (ms), `input_length`,
  `output_length`, `hash_ids` (one id per 512-token block of the prompt, the last one possibly
  partial; equal leading ids are an equal prefix).
- workloadlang: a first line `{"trace": "workloadlang", "version": 1, "block_tokens": B}`, then
  one request a line: `t` (seconds from the trace's start), `session` (optional: a session's
  requests are sent one after another), `input_tokens`, `output_tokens`, `blocks` (optional:
  the prompt's block ids; without them the prompt shares nothing).

This module reads files; the planner does not (it takes the `Trace`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeGuard

MAX_LINE = 8 << 20  # bytes of one record
MOONCAKE_BLOCK = 512
Format = Literal["mooncake", "workloadlang"]


class TraceError(Exception):
    """A trace file that cannot be replayed: `message`, and the 1-based `line` it is about
    (0 for the file as a whole)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message, self.line = message, line


@dataclass(frozen=True)
class Selection:
    """What to take of a trace: skip `offset` records, then at most `limit` (0: all); with
    `sample` below 1, keep that share of them (of its sessions, when it has sessions), chosen by
    a hash of the record's number (or session's name): the same records every time."""

    offset: int = 0
    limit: int = 0
    sample: float = 1.0


@dataclass(frozen=True, slots=True)
class Record:
    """One request of a trace: send time `t` (seconds from the trace's first selected record),
    `session` (an index into `Trace.sessions`), prompt and output sizes in tokens, its block
    ids, and its record number in the file (0-based)."""

    t: float
    session: int
    input_tokens: int
    output_tokens: int
    blocks: tuple[int | str, ...]
    number: int


@dataclass(frozen=True)
class Trace:
    path: str
    format: Format
    sha256: str
    records_total: int
    block_tokens: int
    sessions: int
    records: tuple[Record, ...]


# ---------------------------------------------------------------- reading


def load(path: str | Path, selection: Selection = Selection(), *, max_records: int,
         max_tokens: int) -> Trace:
    """Read and check a trace file. Raises `TraceError`."""
    with _open_regular(path) as f:
        return _read(f, str(path), selection, max_records, max_tokens)


def _open_regular(path: str | Path) -> IO[bytes]:
    """The trace file, opened for reading, when it is a regular file. Raises `TraceError` for
    one that cannot be read or is not a regular file: a named pipe would block the open until
    something writes to it, a device may never end (it is opened without blocking and checked
    before a byte is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise TraceError(f"cannot read the trace file: {e.strerror or e}") from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(kind) else "a named pipe" if stat.S_ISFIFO(kind) \
            else "a device" if stat.S_ISCHR(kind) or stat.S_ISBLK(kind) else "a socket" \
            if stat.S_ISSOCK(kind) else "not a regular file"
        raise TraceError(f"the trace file is {what}: give a regular file (copy a stream to a "
                         "file first)")
    return os.fdopen(fd, "rb")


def _lines(f: IO[bytes], digest: Any):
    """(line number, bytes) of each non-blank line; every byte goes into `digest`."""
    number = 0
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        digest.update(line)
        number += 1
        if len(line) > MAX_LINE:
            raise TraceError(f"a line longer than {MAX_LINE >> 20} MiB", number)
        if line.strip():
            yield number, line


def _object(line: bytes, number: int) -> dict:
    try:
        value = json.loads(line)
    except UnicodeDecodeError:
        raise TraceError("not UTF-8 text", number) from None
    except (ValueError, RecursionError) as e:
        raise TraceError(f"not a JSON object ({str(e).split(':')[0]})", number) from None
    if not isinstance(value, dict):
        raise TraceError("not a JSON object", number)
    return value


def _read(f: IO[bytes], path: str, sel: Selection, max_records: int, max_tokens: int) -> Trace:
    digest = hashlib.sha256()
    lines = _lines(f, digest)
    first = next(lines, None)
    if first is None:
        raise TraceError("the trace file is empty")
    head = _object(first[1], first[0])
    fmt: Format
    if head.get("trace") == "workloadlang":
        fmt, block = "workloadlang", _header(head, first[0])
        records = lines
    elif "hash_ids" in head or "input_length" in head:
        fmt, block = "mooncake", MOONCAKE_BLOCK
        records = _chain(first, lines)
    else:
        raise TraceError("neither a workloadlang trace header "
                         '({"trace": "workloadlang", ...}) nor a Mooncake record '
                         "(timestamp, input_length, output_length, hash_ids)", first[0])
    parse = _mooncake if fmt == "mooncake" else _generic
    rows, total, sessions = _select(records, parse, block, sel, max_records, max_tokens)
    for _ in lines:  # the rest still counts in the hash and the record count
        total += 1
    return _finish(path, fmt, digest.hexdigest(), total, block, rows, sessions)


def _chain(first, rest):
    yield first
    yield from rest


def _header(head: Mapping[str, Any], number: int) -> int:
    if head.get("version") != 1:
        raise TraceError(f"unknown workloadlang trace version {head.get('version')!r} "
                         "(this reader knows version 1)", number)
    block = head.get("block_tokens", MOONCAKE_BLOCK)
    if not _whole(block) or block < 1:
        raise TraceError(f"block_tokens must be a whole number above 0, got {block!r}", number)
    return block


def _whole(v: object) -> TypeGuard[int]:
    """Whether `v` is an int (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _number(rec: Mapping[str, Any], key: str, number: int, low: int) -> int:
    v = rec.get(key)
    if not _whole(v) or v < low:
        raise TraceError(f"`{key}` must be a whole number of at least {low}, got {v!r}", number)
    return v


def _time(v: Any, key: str, number: int) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
        raise TraceError(f"`{key}` must be a time of at least 0, got {v!r}", number)
    return float(v)


def _blocks(v: Any, tokens: int, block: int, key: str, number: int) -> tuple:
    want = math.ceil(tokens / block)
    if not isinstance(v, list) or len(v) != want:
        n = len(v) if isinstance(v, list) else type(v).__name__
        raise TraceError(f"`{key}` must list one id per {block}-token block of the prompt "
                         f"({want} for {tokens:,} tokens), got {n}", number)
    for x in v:
        if not (_whole(x) or isinstance(x, str)):
            raise TraceError(f"a block id must be a whole number or a string, got {x!r}", number)
    return tuple(v)


def _mooncake(rec: Mapping[str, Any], number: int, block: int, max_tokens: int):
    """(time s, session key, input, output, blocks) of a Mooncake record."""
    t = _time(rec.get("timestamp"), "timestamp", number) / 1000
    tokens = _tokens(rec, "input_length", number, max_tokens)
    out = _number(rec, "output_length", number, 1)
    return t, None, tokens, out, _blocks(rec.get("hash_ids"), tokens, block, "hash_ids", number)


def _generic(rec: Mapping[str, Any], number: int, block: int, max_tokens: int):
    """(time s, session key, input, output, blocks) of a workloadlang trace record."""
    t = _time(rec.get("t", 0), "t", number)
    session = rec.get("session")
    if session is not None and not (_whole(session) or isinstance(session, str)):
        raise TraceError(f"`session` must be a string or a whole number, got {session!r}", number)
    tokens = _tokens(rec, "input_tokens", number, max_tokens)
    out = _number(rec, "output_tokens", number, 1)
    blocks = rec.get("blocks")
    blocks = ((f"#{number}/{k}" for k in range(math.ceil(tokens / block))) if blocks is None
              else _blocks(blocks, tokens, block, "blocks", number))
    return t, session, tokens, out, tuple(blocks)


def _tokens(rec: Mapping[str, Any], key: str, number: int, max_tokens: int) -> int:
    n = _number(rec, key, number, 1)
    if n > max_tokens:
        raise TraceError(f"`{key}` is {n:,} tokens, more than a request may hold ({max_tokens:,}: "
                         "--max-request-tokens)", number)
    return n


def _kept(sample: float, key: str) -> bool:
    """Whether `key` (a record number or a session) is in a sample of this share."""
    if sample >= 1:
        return True
    draw = int.from_bytes(hashlib.sha256(f"sample\0{key}".encode()).digest()[:8], "big")
    return draw / 2**64 < sample


def _select(records, parse, block: int, sel: Selection, max_records: int, max_tokens: int):
    """The selected rows (number, time, session key, input, output, blocks), the records
    seen, the session keys in order of their first row."""
    rows: list[tuple[int, Any, int, Any, Any, Any]] = []  # as `parse` gives them
    sessions: dict[str, int] = {}
    total = index = 0
    for number, line in records:
        index, total = index + 1, total + 1
        if index <= sel.offset:
            continue
        if sel.limit and index > sel.offset + sel.limit:
            break
        t, session, tokens, out, blocks = parse(_object(line, number), number, block, max_tokens)
        key = f"s{session}" if session is not None else f"r{index - 1}"
        if not _kept(sel.sample, key):
            continue
        if len(rows) >= max_records:
            raise TraceError(f"more than {max_records:,} requests selected (--max-requests; "
                             "or take fewer with the trace's offset, limit or sample)", number)
        sessions.setdefault(key, len(sessions))
        rows.append((index - 1, t, sessions[key], tokens, out, blocks))
    if not rows:
        raise TraceError(f"no record selected: the file has {total:,} record(s), the offset "
                         f"skips {sel.offset:,}, the sample keeps {sel.sample:.0%}")
    return rows, total, len(sessions)


def _finish(path: str, fmt: Format, sha: str, total: int, block: int, rows, sessions: int) -> Trace:
    """Records in send order (stable), times from the first selected record, sessions
    numbered in the order of their first request."""
    rows.sort(key=lambda r: r[1])
    t0 = rows[0][1]
    order: dict[int, int] = {}
    records = tuple(Record(t=t - t0, session=order.setdefault(s, len(order)), input_tokens=n,
                           output_tokens=o, blocks=b, number=i) for i, t, s, n, o, b in rows)
    return Trace(path=path, format=fmt, sha256=sha, records_total=total, block_tokens=block,
                 sessions=sessions, records=records)


# ---------------------------------------------------------------- for a workload


def load_for(wl: Any, env: Mapping[str, Any], limits: Any) -> dict[str, Trace]:
    """The trace of each trace session of `wl` (its path and selection evaluated with `env`,
    the resolved params), by session name. Raises `WorkloadError` (WL409: the file; WL404: an
    option's value) with every problem found."""
    from workloadlang.diagnostics import Diagnostic, WorkloadError

    out, diags = {}, []
    for s in wl.sessions:
        if s.trace is None:
            continue
        try:
            path, sel = _source(s.trace, env)
            out[s.name] = load(path, sel, max_records=limits.requests,
                               max_tokens=limits.request_tokens)
        except _OptionError as e:
            diags.append(Diagnostic(code="WL404", message=e.message, span=e.span))
        except TraceError as e:
            where = f"{path}:{e.line}: " if e.line else f"{path}: "
            diags.append(Diagnostic(code="WL409", message=f"trace {where}{e.message}",
                                    span=s.trace.path.span,
                                    hint="docs/traces.md describes the formats"))
    if diags:
        raise WorkloadError(diags)
    return out


class _OptionError(Exception):
    def __init__(self, message: str, span: Any):
        super().__init__(message)
        self.message, self.span = message, span


def _source(t: Any, env: Mapping[str, Any]) -> tuple[str, Selection]:
    """The path and the selection of a trace session, evaluated."""
    from workloadlang.evaluate import EvalError, evaluate

    def get(expr: Any) -> Any:
        try:
            return evaluate(expr, env)
        except EvalError as e:
            raise _OptionError(e.message, e.span or expr.span) from None

    path = get(t.path)
    if not isinstance(path, str) or not path:
        raise _OptionError(f"the path of `trace` must be a file name, got {path!r}", t.path.span)
    opts = {o.key: (get(o.value), o.value.span) for o in t.options}
    kw: dict[str, Any] = {}
    for key in ("offset", "limit"):
        if key in opts:
            v, span = opts[key]
            if not _whole(v) or v < 0:
                raise _OptionError(f"the trace option `{key}` must be a whole number of at "
                                   f"least 0, got {v!r}", span)
            kw[key] = v
    if "sample" in opts:
        v, span = opts["sample"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise _OptionError(f"the trace option `sample` must be a share in (0, 1], got {v!r}",
                               span)
        kw["sample"] = float(v)
    return path, Selection(**kw)
