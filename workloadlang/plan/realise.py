"""Realise planned prompts as text, lazily, one request at a time.

Input: a `Plan`, a `Sizer` (how many filler words make N tokens), and at run time the replies of
earlier requests. Output: OpenAI chat `messages` for one request.

A filler's text is a pure function of `(salt, key, words)`, realised once and reused, so a
conversation re-sent with one more turn is byte-identical up to the new turn (what a prefix cache
needs). Sizing is pluggable: `RatioSizer` uses a tokens-per-word ratio (calibrated from the
engine's usage when it has no tokenizer endpoint); `ExactSizer` asks the engine's tokenizer and
corrects each filler to its planned size.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from workloadlang.plan import synth
from workloadlang.plan.model import Plan, PMessage, PRequest, Seg

NO_OUTPUT = "[no output generated]"
KEPT_BYTES = 256 * 1024 * 1024
"""The most text the realiser keeps made (messages and their encodings), oldest dropped first:
a message is a pure function of the plan and the replies it carries, so one made again is the
same bytes; a run of any length realises in bounded memory."""


class Reply(Protocol):
    """What the realiser needs of an earlier request's outcome."""

    content: str
    reasoning: str
    completion_tokens: int | None


class Sizer(Protocol):
    """How many words make a text of N tokens. `prepare` readies a text before it is realised
    (`plain`: salted filler words only; else it holds other text, a needle sentence)."""

    def words_for(self, key: str, tokens: int) -> int: ...

    async def prepare(self, key: str, tokens: int, render: Callable[[int], str],
                      plain: bool = True) -> None: ...


class RatioSizer:
    """Words for N tokens from a fixed tokens-per-word ratio."""

    def __init__(self, tokens_per_word: float = 1.0):
        self.tokens_per_word = tokens_per_word

    def words_for(self, key: str, tokens: int) -> int:
        return max(0, round(tokens / self.tokens_per_word))

    async def prepare(self, key: str, tokens: int, render: Callable[[int], str],
                      plain: bool = True) -> None:
        return None


class ExactSizer(RatioSizer):
    """Sizes each filler with the engine's tokenizer: a first guess from the ratio, then up to
    two corrections, keeping the word count whose token count is closest to the plan. A
    correction scales by the tokens per word just measured, so a stale ratio still converges."""

    def __init__(self, count: Callable[[str], Awaitable[int]], tokens_per_word: float = 1.0):
        super().__init__(tokens_per_word)
        self.count = count
        self.sized: dict[str, int] = {}
        self.measured: dict[str, int] = {}

    def words_for(self, key: str, tokens: int) -> int:
        return self.sized.get(key, super().words_for(key, tokens))

    async def prepare(self, key: str, tokens: int, render: Callable[[int], str],
                      plain: bool = True) -> None:
        if key in self.sized or tokens <= 0:
            return
        words = max(1, super().words_for(key, tokens))
        best: tuple[int, int] | None = None
        for _ in range(3):
            got = await self.count(render(words))
            if best is None or abs(got - tokens) < abs(best[1] - tokens):
                best = (words, got)
            if got == tokens:
                break
            rate = got / words if words and got else self.tokens_per_word
            words = max(0, words + round((tokens - got) / rate))
        assert best is not None  # three tries, each counted
        self.sized[key], self.measured[key] = best


def branch_score(rule: str, request: str | None, o: Any) -> float | None:
    """How a branch ranks for `keep first` (when its last request's answer ended: a branch
    that sent nothing ended at once) or `keep longest` (minus its last request's prompt and
    generated tokens); lowest first. None for a branch whose last request failed or was not
    sent."""
    if request is None:
        return float("-inf") if rule == "first" else 0.0
    if o is None or getattr(o, "error", None) is not None:
        return None
    if rule == "first":
        return (getattr(o, "t_send", 0.0) or 0.0) + (getattr(o, "e2e_s", 0.0) or 0.0)
    generated = o.completion_tokens if o.completion_tokens is not None else \
        getattr(o, "streamed_tokens", 0)
    return -float((getattr(o, "prompt_tokens", 0) or 0) + (generated or 0))


def fillers(segs: tuple[Seg, ...]):
    """The filler segments of a message, a tool call's arguments' included."""
    for seg in segs:
        if seg.kind == "filler":
            yield seg
        elif seg.kind == "call":
            yield from (v for _, v in seg.args if v.kind == "filler")


class Realiser:
    """Turns planned requests into chat messages; makes each message once, when it is final."""

    def __init__(self, plan: Plan, sizer: Sizer | None = None,
                 reasoning_key: str = "reasoning_content", kept_bytes: int = KEPT_BYTES):
        self.plan = plan
        self.sizer = sizer or RatioSizer()
        self.reasoning_key = reasoning_key
        self._static: dict[int, dict[str, Any]] = {}
        self._replies: dict[int, tuple[str, ...]] = {}  # message -> the replies it carries
        self._encoded: dict[int, bytes] = {}  # final message -> its encoding (`encoded`)
        self._kept: OrderedDict[int, int] = OrderedDict()  # the two above: bytes, oldest first
        self._kept_bytes, self._kept_max = 0, kept_bytes
        self.chosen: dict[int, int] = {}  # `Plan.picks` index -> the branch it kept
        self._resolved: OrderedDict[int, tuple[int, ...]] = OrderedDict()  # `_ids`, decided
        self._joins = frozenset(i for i, m in enumerate(plan.messages) if m.pick is not None) \
            if plan.picks else frozenset()
        self._prepared: set[int] = set()  # messages whose fillers `prepare` sized

    async def prepare(self, req: PRequest) -> None:
        """Size every filler of this request's prompt, a tool call's arguments' too, whichever
        branch a `keep` chooses (each message once: a conversation's earlier messages were
        sized with the request that first sent them)."""
        for i in self._every_id(self.plan.message_ids(req), set()):
            if i in self._prepared:
                continue
            self._prepared.add(i)
            for seg in fillers(self.plan.messages[i].segs):
                await self.sizer.prepare(seg.key, seg.tokens, self._renderer(seg),
                                         seg.needle_at is None and not seg.text)

    def messages(self, req: PRequest, replies: Mapping[str, Reply]) -> list[dict[str, Any]]:
        """The chat messages of `req`; `replies` holds the outcomes its reply segments name."""
        ids = self._ids(req, replies)
        assert ids is not None  # forced: every pick is decided
        return [self._message(i, replies) for i in ids]

    # -- the branch a `keep first|longest` goes on from (`Plan.picks`)

    def _ids(self, req: PRequest, replies: Mapping[str, Any],
             force: bool = True) -> tuple[int, ...] | None:
        """The messages of `req`'s prompt as sent: each `join` replaced by the conversation of
        the branch its pick keeps, decided from `replies` (the branches' outcomes) the first
        time it is needed. None when a pick is not decided and `force` is off (a branch is
        still in flight)."""
        ids = self.plan.message_ids(req)
        if not self._joins:
            return ids
        found = self._resolved.get(req.last_message if req.last_message is not None else -1)
        if found is not None:
            return found
        out = self._resolve(ids, replies, force)
        if out is not None:
            self._resolved[req.last_message if req.last_message is not None else -1] = out
            if len(self._resolved) > 256:
                self._resolved.popitem(last=False)
        return out

    def _resolve(self, ids: tuple[int, ...], replies: Mapping[str, Any],
                 force: bool) -> tuple[int, ...] | None:
        at = next((p for p in range(len(ids) - 1, -1, -1) if ids[p] in self._joins), None)
        if at is None:
            return ids
        pick = self.plan.messages[ids[at]].pick
        assert pick is not None
        k = self._choose(pick, replies, force)
        if k is None:
            return None
        head = self._resolve(self.plan.chain(self.plan.picks[pick].branches[k].last_message),
                             replies, force)
        return None if head is None else head + ids[at + 1:]

    def _choose(self, pick: int, replies: Mapping[str, Any], force: bool) -> int | None:
        """The branch pick `pick` keeps (see `Pick`); None while a branch's last request has
        no outcome yet, unless `force` (then the branches without one are passed over)."""
        if pick in self.chosen:
            return self.chosen[pick]
        p = self.plan.picks[pick]
        ends = [b.last_request for b in p.branches]
        outs = [None if r is None else replies.get(r) for r in ends]
        if not force and any(r is not None and o is None for r, o in zip(ends, outs)):
            return None
        scored = [(k, branch_score(p.rule, r, o)) for k, (r, o) in enumerate(zip(ends, outs))]
        scored = [(k, v) for k, v in scored if v is not None]
        self.chosen[pick] = min(scored, key=lambda kv: (kv[1], kv[0]))[0] if scored else 0
        return self.chosen[pick]

    def source_of(self, req: PRequest) -> str | None:
        """`req.prefix_source`, or, when it is the end of a kept fork's branch 0 and the run
        kept another branch, that branch's end (the conversation `req` was sent on)."""
        src = req.prefix_source
        for pick, k in self.chosen.items():
            branches = self.plan.picks[pick].branches
            if k and src is not None and src == branches[0].last_request:
                return branches[k].last_request
        return src

    def _every_id(self, ids: tuple[int, ...], seen: set[int]) -> Iterator[int]:
        """`ids`, and behind each `join` every branch's conversation (each once)."""
        for i in ids:
            yield i
            pick = self.plan.messages[i].pick
            if pick is not None and pick not in seen:
                seen.add(pick)
                for b in self.plan.picks[pick].branches:
                    yield from self._every_id(self.plan.chain(b.last_message), seen)

    def encoded(self, req: PRequest, replies: Mapping[str, Reply],
                encode: Callable[[dict[str, Any]], bytes],
                force: bool = True) -> list[dict[str, Any] | bytes]:
        """The chat messages of `req` as `messages` gives them, except that each final message
        (see `_message`) comes as its encoding by `encode`, made once: a conversation re-sent
        with one more turn encodes only what is new. Without `force`, a `keep` whose branches
        are not all in is not decided: the output is then empty (made ahead, nothing is)."""
        out: list[dict[str, Any] | bytes] = []
        ids = self._ids(req, replies, force)
        for i in ids or ():
            done = self._encoded.get(i)
            if done is None:
                m = self._message(i, replies)
                if i not in self._static:
                    out.append(m)
                    continue
                done = self._encoded[i] = encode(m)
                self._keep(i, len(done))
            out.append(done)
        return out

    def again(self, req: PRequest, replies: Mapping[str, Reply], k: int) -> list[dict[str, Any]]:
        """The chat messages of `req` measured again, try `k`: as `messages` gives them, its
        last message's fillers drawn afresh (keyed `KEY/again/k`, as many words) so that an
        engine that cached the first try's text has none of this one's; a probe as it is."""
        out = self.messages(req, replies)
        if req.kind == "probe" or req.last_message is None or not out:
            return out
        m = self.plan.messages[req.last_message]
        parts = [synth.filler(self.plan.salt, f"{s.key}/again/{k}",
                              self.sizer.words_for(s.key, s.tokens))
                 for s in m.segs if s.kind == "filler"]
        return out[:-1] + [{**out[-1], "content": " ".join(parts)}]

    def can_realise(self, req: PRequest, replies: Mapping[str, Reply]) -> bool:
        """Output: True when every earlier reply that `req`'s messages carry is in `replies`
        (its messages are then final: a reply, once there, does not change). Looks only at
        the messages not made yet."""
        static = self._static
        ids = self._ids(req, replies, force=False)
        return ids is not None and all(k in replies for i in ids if i not in static
                                       for k in self._reply_keys(i))

    def _reply_keys(self, i: int) -> tuple[str, ...]:
        """Output: the requests whose replies message `i` carries (none for most)."""
        keys = self._replies.get(i)
        if keys is None:
            keys = self._replies[i] = tuple(s.key for s in self.plan.messages[i].segs
                                            if s.kind in ("reply", "partial"))
        return keys

    def _message(self, i: int, replies: Mapping[str, Reply]) -> dict[str, Any]:
        """Output: message `i`, made once: a message without replies at its first use, one that
        carries replies once every one of them is in (a reply, once there, does not change;
        before that it is made again at each use, with the missing ones marked)."""
        cached = self._static.get(i)
        if cached is not None:
            return cached
        m = self.plan.messages[i]
        keys = self._reply_keys(i)
        if keys:
            out = self._assistant(m, replies)
            if not all(k in replies for k in keys):
                return out
        else:
            out = {"role": m.role, "content": self._content(m.segs)}
            self._tool_fields(m, out)
        self._static[i] = out
        self._keep(i, len(out["content"] or "") + len(out.get(self.reasoning_key, "")))
        return out

    def _keep(self, i: int, size: int) -> None:
        """Count `size` bytes made for message `i`; past `KEPT_BYTES`, drop the oldest
        messages made (made again, the same, when they are sent again)."""
        self._kept[i] = self._kept.get(i, 0) + size
        self._kept_bytes += size
        while self._kept_bytes > self._kept_max and len(self._kept) > 1:
            j, n = self._kept.popitem(last=False)
            self._kept_bytes -= n
            self._static.pop(j, None)
            self._encoded.pop(j, None)

    def _tool_fields(self, m: PMessage, out: dict[str, Any]) -> None:
        """An assistant turn's `tool_calls` (OpenAI chat format: the arguments a JSON object
        of strings), a tool message's `tool_call_id`."""
        calls = [s for s in m.segs if s.kind == "call"]
        if calls:
            out["tool_calls"] = [{"id": c.key, "type": "function", "function": {
                "name": c.text, "arguments": json.dumps(
                    {k: self._seg_text(v) for k, v in c.args}, ensure_ascii=False)}}
                for c in calls]
        if m.role == "tool":
            out["tool_call_id"] = m.call_id

    def _content(self, segs: tuple[Seg, ...]) -> str:
        """A message's text: its segments in order, a space between two fillers (the last word
        of one and the first of the next stay two words: a trace's blocks)."""
        parts, prev = [], None
        for s in segs:
            if s.kind == "call":  # sent as `tool_calls` (`_tool_fields`)
                continue
            if prev is not None and prev.kind == "filler" and s.kind == "filler":
                parts.append(" ")
            parts.append(self._seg_text(s))
            prev = s
        return "".join(parts)

    def _assistant(self, m: PMessage, replies: Mapping[str, Reply]) -> dict[str, Any]:
        content, reasoning = [], []
        for s in m.segs:
            r = replies.get(s.key) if s.kind in ("reply", "partial") else None
            if s.kind == "call":
                continue
            if r is None:
                content.append(self._seg_text(s))
            elif s.synthetic:
                content.append(synth.filler(self.plan.salt, s.key + ":synthetic",
                                            r.completion_tokens or s.tokens))
            else:
                content.append(r.content)
                if not s.content_only:  # `replay content` leaves the reasoning out
                    reasoning.append(r.reasoning)
        msg: dict[str, Any] = {"role": m.role, "content": "".join(content)}
        if "".join(reasoning):
            msg[self.reasoning_key] = "".join(reasoning)
        elif not msg["content"] and all(s.kind in ("reply", "call") for s in m.segs):
            msg["content"] = NO_OUTPUT
        self._tool_fields(m, msg)
        return msg

    def _seg_text(self, s: Seg) -> str:
        if s.kind == "text":
            return self.plan.text_of(s)
        if s.kind == "filler":
            return self._renderer(s)(self.sizer.words_for(s.key, s.tokens))
        return NO_OUTPUT  # a reply that never arrived (its request failed)

    def _renderer(self, s: Seg) -> Callable[[int], str]:
        salt = self.plan.salt

        def render(n: int) -> str:
            if s.text:  # a dataset's words (`filler N from NAME`)
                return " ".join(s.text.split(" ", n)[:n])
            if s.needle_at is None:
                return synth.filler(salt, s.key, n)
            needle = synth.needle_sentence(synth.needle_code(salt, s.key))
            words = synth.words(salt, s.key, max(0, n - len(needle.split())))
            at = int(len(words) * s.needle_at)
            return " ".join(words[:at] + [needle] + words[at:])

        return render
