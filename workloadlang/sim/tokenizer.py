"""The simulator's tokenizer, chat template and chained block hashes.

Input: OpenAI chat `messages` (or plain text). Output: token counts, token lists, token ids and
the chained hashes of the prompt's full blocks.

A token is a whitespace-separated word (`str.split`). The template is ChatML-like, one token per
marker: `<|im_start|> role words... <|im_end|>`; an assistant message with reasoning renders
`<think> reasoning... </think>` before its content, and each of its `tool_calls` after it as
`<tool_call> name key words... key words... </tool_call>` (the arguments' JSON object, each
key then its value's words); a `tool` message renders like any other; the generation prompt is
`<|im_start|> assistant`. A final assistant message is continued (left open, no prompt added).

Rendering is incremental and memoised per message prefix (`Renderer`), so a conversation that
grows by one turn only splits and hashes the new turn.
"""

from __future__ import annotations

import json
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, islice
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK = "<think>"
THINK_END = "</think>"
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
GENERATION_PROMPT: tuple[str, ...] = (IM_START, "assistant")
ROOT_HASH = 0x5EED


class MessageError(ValueError):
    """The request's messages are malformed (an HTTP 400)."""


def _chain(prev: int, block: tuple) -> int:
    return hash((prev, block))


def chain_hashes(tokens: Sequence[str], block_size: int, prev: int = ROOT_HASH) -> list[int]:
    """Chained hashes of the full blocks of `tokens`, continuing from hash `prev`.

    Input: tokens, block size B, the hash of the preceding block. Output: one int per full block.
    """
    blocks = zip(*[iter(tokens)] * block_size)
    return list(islice(accumulate(blocks, _chain, initial=prev), 1, None))


def content_text(content: Any) -> str:
    """The text of an OpenAI message `content`: a string, None, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    raise MessageError("message content must be a string, null or a list of text parts")


def reasoning_text(message: dict) -> str:
    """An assistant message's replayed reasoning (`reasoning_content`, else `reasoning`)."""
    value = message.get("reasoning_content") or message.get("reasoning") or ""
    return value if isinstance(value, str) else ""


def _fields(message: Any) -> tuple[str, str, str, tuple[str, ...]]:
    """(role, reasoning, content, tool calls' tokens) of one message; MessageError when
    malformed."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise MessageError("each message must be an object with a string 'role'")
    role = message["role"].strip() or "user"
    reasoning = reasoning_text(message) if role == "assistant" else ""
    calls = call_tokens(message.get("tool_calls")) if role == "assistant" else ()
    return role, reasoning, content_text(message.get("content")), calls


def call_tokens(calls: Any) -> tuple[str, ...]:
    """The tokens of an assistant message's `tool_calls` (None or a list of
    `{"function": {"name", "arguments"}}`); MessageError when malformed."""
    if calls is None:
        return ()
    if not isinstance(calls, list):
        raise MessageError("'tool_calls' must be a list")
    out: list[str] = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise MessageError("each tool call must be an object with a 'function' holding a "
                               "string 'name'")
        out.append(TOOL_CALL)
        out.extend(fn["name"].split())
        out.extend(argument_tokens(fn.get("arguments")))
        out.append(TOOL_CALL_END)
    return tuple(out)


def argument_tokens(arguments: Any) -> list[str]:
    """A tool call's arguments as tokens: a JSON object (or its text) as each key then its
    value's words; anything else as its text's words."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments.split()
        arguments = parsed if isinstance(parsed, dict) else arguments
    if isinstance(arguments, dict):
        out: list[str] = []
        for key, value in arguments.items():
            out.append(str(key))
            out.extend((value if isinstance(value, str) else json.dumps(value)).split())
        return out
    return [] if arguments is None else json.dumps(arguments).split()


def message_tokens(role: str, reasoning: str, text: str, open_: bool,
                   calls: tuple[str, ...] = ()) -> list[str]:
    """Tokens of one rendered message; `open_` leaves it unterminated (a continuation)."""
    out = [IM_START, role]
    if reasoning:
        out.append(THINK)
        out.extend(reasoning.split())
        out.append(THINK_END)
    out.extend(text.split())
    out.extend(calls)
    if not open_:
        out.append(IM_END)
    return out


def _check_messages(messages: Any) -> list:
    if not isinstance(messages, list) or not messages:
        raise MessageError("'messages' must be a non-empty list")
    return messages


def render_tokens(messages: Any, add_generation_prompt: bool = True) -> list[str]:
    """The full token list of a chat prompt (uncached; for /tokenize and tests)."""
    messages = _check_messages(messages)
    out: list[str] = []
    last = len(messages) - 1
    continuation = False
    for i, m in enumerate(messages):
        role, reasoning, text, calls = _fields(m)
        open_ = i == last and role == "assistant"
        continuation = continuation or open_
        out.extend(message_tokens(role, reasoning, text, open_, calls))
    if add_generation_prompt and not continuation:
        out.extend(GENERATION_PROMPT)
    return out


def text_tokens(text: str) -> list[str]:
    """Tokens of plain text (no template)."""
    return text.split()


@lru_cache(maxsize=1 << 16)
def token_id(word: str) -> int:
    """The stable id of a token: crc32 of its UTF-8 bytes."""
    return zlib.crc32(word.encode("utf-8", "surrogatepass"))


def token_ids(tokens: Iterable[str]) -> list[int]:
    """Stable ids of many tokens (memoised per distinct word)."""
    return list(map(token_id, tokens))


@dataclass(frozen=True)
class PrefixState:
    """Rendering state after some messages: token count, full-block hashes, leftover tokens.

    `hashes` is shared between states and must never be mutated.
    """

    n: int
    hashes: list
    tail: tuple


ROOT_STATE = PrefixState(0, [], ())


def advance(state: PrefixState, tokens: list[str], block_size: int) -> PrefixState:
    """The state after appending `tokens` to `state` (new hashes for new full blocks only)."""
    toks = list(state.tail) + tokens if state.tail else tokens
    full = len(toks) // block_size
    hashes = state.hashes
    if full:
        prev = hashes[-1] if hashes else ROOT_HASH
        hashes = hashes + chain_hashes(toks, block_size, prev)
    return PrefixState(state.n + len(tokens), hashes, tuple(toks[full * block_size:]))


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt: its final state plus per-message info for the needle scan.

    `starts[i]`: tokens before message i; `texts[i]`, `roles[i]`, `reasonings[i]`: its fields.
    """

    state: PrefixState
    continuation: bool
    starts: list
    texts: list
    roles: list
    reasonings: list

    @property
    def n(self) -> int:
        return self.state.n

    def content_offset(self, i: int) -> int:
        """Index of message i's first content token in the prompt."""
        reasoning = self.reasonings[i]
        return self.starts[i] + 2 + (len(reasoning.split()) + 2 if reasoning else 0)


class Renderer:
    """Renders chat prompts into `Rendered`, memoising the state after every message prefix.

    The memo key chains Python hashes of (previous key, role, reasoning, content, open), so a
    prefix seen before costs one string hash per message instead of a split and block hashes.
    """

    def __init__(self, block_size: int, max_entries: int = 1024) -> None:
        self.block_size = block_size
        self.max_entries = max_entries
        self._memo: OrderedDict[int, PrefixState] = OrderedDict()
        self.memo_hits = 0
        self.memo_misses = 0

    def render(self, messages: Any, add_generation_prompt: bool = True) -> Rendered:
        """Input: chat messages. Output: the rendered prompt (raises MessageError)."""
        messages = _check_messages(messages)
        state, key, last = ROOT_STATE, ROOT_HASH, len(messages) - 1
        starts, texts, roles, reasonings = [], [], [], []
        continuation = False
        for i, m in enumerate(messages):
            role, reasoning, text, calls = _fields(m)
            open_ = i == last and role == "assistant"
            continuation = continuation or open_
            starts.append(state.n)
            texts.append(text)
            roles.append(role)
            reasonings.append(reasoning)
            key = hash((key, role, reasoning, text, open_, calls))
            state = self._step(key, state, role, reasoning, text, open_, calls)
        if add_generation_prompt and not continuation:
            state = advance(state, list(GENERATION_PROMPT), self.block_size)
        return Rendered(state, continuation, starts, texts, roles, reasonings)

    def _step(self, key: int, state: PrefixState, role: str, reasoning: str, text: str,
              open_: bool, calls: tuple[str, ...] = ()) -> PrefixState:
        memo = self._memo
        found = memo.get(key)
        if found is not None:
            memo.move_to_end(key)
            self.memo_hits += 1
            return found
        self.memo_misses += 1
        found = advance(state, message_tokens(role, reasoning, text, open_, calls),
                        self.block_size)
        memo[key] = found
        if len(memo) > self.max_entries:
            memo.popitem(last=False)
        return found
