"""A dataset of prompts the user has: a file (or folder) read into a checked `Dataset` for the
planner (which reads no file).

Input: a path and the most text to keep. Output: `Dataset`: its items in the file's order, each
a prompt and the answer recorded for it (None when the format has none), the file's sha256 and
its format; or `DatasetError` with a message for the user (the file is missing, empty,
malformed). Formats, told apart by their content:

- ShareGPT-style JSON: a list of conversations, each an object with `conversations` (turns
  `{"from": "human" | "gpt" | "system", "value": ...}`) or `messages` (OpenAI turns `{"role",
  "content"}`): an item is a conversation's first user turn and the assistant turn after it;
  a conversation without a user turn is passed over.
- JSONL: one item a line, a JSON string (the prompt) or an object with the prompt in `prompt`,
  `text`, `question`, `input` or `instruction` and, optionally, the answer in `answer`,
  `response`, `completion` or `output` (a ShareGPT conversation per line is read too).
- a folder: every `*.txt` and `*.md` file in it, by name, one item each (its whole text).

Memory stays bounded whatever the file holds: a JSON list is read element by element, and
reading stops (with a note) once `max_text` characters of prompts and answers are kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MAX_TEXT = 64 * 1024 * 1024  # characters of prompts and answers kept from one dataset
MAX_ITEM = 4 * 1024 * 1024  # characters of one prompt or answer
_CHUNK = 1 << 20
_PROMPT_KEYS = ("prompt", "text", "question", "input", "instruction")
_ANSWER_KEYS = ("answer", "response", "completion", "output")
_USER = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
FILE_SUFFIXES = (".txt", ".md")


class DatasetError(Exception):
    """A dataset that cannot be used; `line` (1-based) where known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message, self.line = message, line


@dataclass(frozen=True)
class Item:
    """One prompt and the answer recorded for it (None: none)."""

    prompt: str
    answer: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A dataset read and checked: its items in file order."""

    path: str
    format: str  # sharegpt | jsonl | folder
    sha256: str
    items: tuple[Item, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def words(self) -> int:
        """The words of every prompt and answer (what `filler N from` can take)."""
        return sum(len(i.prompt.split()) + len((i.answer or "").split()) for i in self.items)


def load(path: str | Path, max_text: int = MAX_TEXT) -> Dataset:
    """Read and check a dataset (see the module). Raises `DatasetError`."""
    p = Path(path)
    if p.is_dir():
        return _folder(p, max_text)
    try:
        f = open(p, "rb")
    except OSError as e:
        raise DatasetError(f"cannot read the dataset: {e.strerror or e}") from None
    with f:
        start = _first_byte(f)
        if start is None:
            raise DatasetError("the dataset file is empty")
        kept = _Kept(max_text)
        if start == b"[":
            fmt = "sharegpt"
            for number, value in _json_list(f):
                kept.add(_conversation(value, number), number)
                if kept.full:
                    break
        else:
            fmt = "jsonl"
            for number, value in _jsonl(f):
                kept.add(_line_item(value, number), number)
                if kept.full:
                    break
        f.seek(0)
        digest = _sha256(f)
    return kept.dataset(str(path), fmt, digest)


class _Kept:
    """Items kept while reading, up to `max_text` characters."""

    def __init__(self, max_text: int) -> None:
        self.items: list[Item] = []
        self.size, self.max_text, self.full, self.skipped = 0, max_text, False, 0
        self.stopped_at: int | None = None

    def add(self, item: Item | None, where: int) -> None:
        if item is None:
            self.skipped += 1
            return
        self.items.append(item)
        self.size += len(item.prompt) + len(item.answer or "")
        if self.size >= self.max_text:
            self.full, self.stopped_at = True, where

    def dataset(self, path: str, fmt: str, sha: str) -> Dataset:
        if not self.items:
            raise DatasetError("the dataset holds no prompt" + (
                f" ({self.skipped} conversation(s) without a user turn)" if self.skipped else ""))
        notes = []
        if self.full:
            notes.append(f"read up to item {self.stopped_at:,}: {self.max_text:,} characters "
                         "of text are kept from one dataset")
        if self.skipped:
            notes.append(f"{self.skipped:,} conversation(s) without a user turn passed over")
        return Dataset(path, fmt, sha, tuple(self.items), tuple(notes))


def _first_byte(f: IO[bytes]) -> bytes | None:
    """Output: the first byte that is not white space (the format), or None (empty)."""
    while chunk := f.read(_CHUNK):
        stripped = chunk.lstrip()
        if stripped:
            f.seek(0)
            return stripped[:1]
    return None


def _sha256(f: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


@dataclass
class _Reading:
    """A JSON list read so far: the text not yet decoded (`buf`, from `at`) and the bytes of a
    character cut by a chunk's end (`raw`)."""

    buf: str = ""
    at: int = 0
    raw: bytes = b""


def _json_list(f: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """(element number, value) of each element of a JSON list, read a chunk at a time (a
    file of any size in memory bounded by a chunk and its largest element)."""
    decoder = json.JSONDecoder()
    state = _Reading()

    def more() -> bool:
        """Read the next chunk onto what is left of the buffer. Output: False at the end."""
        chunk = f.read(_CHUNK)
        if not chunk:
            if state.raw:
                raise DatasetError("not UTF-8 text")
            return False
        raw = state.raw + chunk
        try:
            text, state.raw = raw.decode("utf-8"), b""
        except UnicodeDecodeError as e:
            if e.start < len(raw) - 3:  # not a character cut by the chunk's end
                raise DatasetError("not UTF-8 text") from None
            text, state.raw = raw[:e.start].decode("utf-8"), raw[e.start:]
        state.buf, state.at = state.buf[state.at:] + text, 0
        return True

    more()
    state.buf = state.buf.lstrip()
    if not state.buf.startswith("["):
        raise DatasetError("not a JSON list")
    state.at, number = 1, 0
    while True:
        while True:  # past white space and commas
            buf, at = state.buf, state.at
            rest = buf[at:].lstrip(" \t\r\n,")
            state.at = len(buf) - len(rest)
            if rest or not more():
                break
        if not rest:
            raise DatasetError("the JSON list is not closed (the file ends inside it)")
        if rest.startswith("]"):
            return
        number += 1
        while True:
            try:
                value, state.at = decoder.raw_decode(state.buf, state.at)
                break
            except (ValueError, RecursionError) as e:
                if len(state.buf) - state.at > MAX_ITEM * 4 or not more():
                    raise DatasetError(f"element {number} is not JSON "
                                       f"({str(e).split(':')[0]})") from None
        yield number, value


def _jsonl(f: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line."""
    number = 0
    while True:
        line = f.readline(MAX_ITEM * 4 + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_ITEM * 4:
            raise DatasetError(f"a line longer than {MAX_ITEM * 4 >> 20} MiB", number)
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except UnicodeDecodeError:
            raise DatasetError("not UTF-8 text", number) from None
        except (ValueError, RecursionError) as e:
            raise DatasetError(f"not JSON ({str(e).split(':')[0]})", number) from None


def _text(value: Any, where: str, line: int | None) -> str:
    if not isinstance(value, str):
        raise DatasetError(f"{where} is not a string", line)
    if len(value) > MAX_ITEM:
        raise DatasetError(f"{where} is longer than {MAX_ITEM:,} characters", line)
    return value


def _conversation(value: Any, number: int) -> Item | None:
    """The first user turn of a conversation and the assistant turn after it; None when it
    has no user turn."""
    if not isinstance(value, dict):
        raise DatasetError(f"element {number} is not an object (a conversation)")
    turns = value.get("conversations", value.get("messages"))
    if not isinstance(turns, list):
        raise DatasetError(f"element {number} has no `conversations` (or `messages`) list")
    for k, turn in enumerate(turns):
        role, text = _turn(turn, number)
        if role in _USER and text.strip():
            after = turns[k + 1] if k + 1 < len(turns) else None
            answer = _turn(after, number) if after is not None else None
            return Item(text, answer[1] if answer and answer[0] in _ASSISTANT else None)
    return None


def _turn(turn: Any, number: int) -> tuple[str, str]:
    if not isinstance(turn, dict):
        raise DatasetError(f"element {number}: a turn is not an object")
    role = turn.get("from", turn.get("role"))
    text = turn.get("value", turn.get("content"))
    if not isinstance(role, str):
        raise DatasetError(f"element {number}: a turn has no `from` (or `role`)")
    return role.lower(), _text(text, f"element {number}: a turn's text", None)


def _line_item(value: Any, number: int) -> Item | None:
    if isinstance(value, str):
        return Item(_text(value, "the prompt", number)) if value.strip() else None
    if not isinstance(value, dict):
        raise DatasetError("not a string or an object", number)
    if "conversations" in value or "messages" in value:
        return _conversation(value, number)
    key = next((k for k in _PROMPT_KEYS if k in value), None)
    if key is None:
        raise DatasetError(f"no prompt (one of {', '.join(_PROMPT_KEYS)})", number)
    prompt = _text(value[key], f"`{key}`", number)
    answer_key = next((k for k in _ANSWER_KEYS if k in value), None)
    answer = None if answer_key is None else _text(value[answer_key], f"`{answer_key}`", number)
    return Item(prompt, answer) if prompt.strip() else None


def _folder(p: Path, max_text: int) -> Dataset:
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in FILE_SUFFIXES)
    if not files:
        raise DatasetError(f"the folder holds no {' or '.join(FILE_SUFFIXES)} file")
    digest, kept = hashlib.sha256(), _Kept(max_text)
    for n, f in enumerate(files, 1):
        data = f.read_bytes()[:MAX_ITEM * 4 + 1]
        digest.update(f.name.encode() + b"\0" + data + b"\0")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise DatasetError(f"{f.name} is not UTF-8 text") from None
        kept.add(Item(_text(text, f.name, None)) if text.strip() else None, n)
        if kept.full:
            break
    return kept.dataset(str(p), "folder", digest.hexdigest())


# ---------------------------------------------------------------- for a workload


def load_for(wl: Any, env: Any) -> dict[str, Dataset]:
    """The dataset of each `dataset NAME = PATH` of `wl` (its path evaluated with `env`, the
    resolved params), by name. Raises `WorkloadError` (WL420) with every problem found."""
    from workloadlang.diagnostics import Diagnostic, WorkloadError
    from workloadlang.evaluate import EvalError, evaluate

    out, diags = {}, []
    for d in wl.datasets:
        try:
            path = evaluate(d.path, env)
        except EvalError as e:
            diags.append(Diagnostic(code="WL404", message=e.message, span=e.span or d.path.span))
            continue
        if not isinstance(path, str) or not path:
            diags.append(Diagnostic(code="WL420", message=f"the path of dataset `{d.name}` must "
                                    f"be a file or folder name, got {path!r}", span=d.path.span))
            continue
        try:
            out[d.name] = load(path)
        except DatasetError as e:
            where = f"{path}:{e.line}: " if e.line else f"{path}: "
            diags.append(Diagnostic(code="WL420", message=f"dataset `{d.name}`: {where}"
                                    f"{e.message}", span=d.path.span,
                                    hint="docs/language.md, \"Datasets\", describes the formats"))
    if diags:
        raise WorkloadError(diags)
    return out
