"""A perfect prefix cache over planned segments: each request's `expected_cached`.

Input: the plan's messages (each names the message it follows, so conversations form a tree) and
its requests (`Stream`s: the prompt's trie node, the node of the prompt followed by the reply
when the reply is kept, the session group, the barrier level). Output: per request the tokens a
cache that never evicts serves from the requests certainly finished before it is sent, the
request that provides them, and the most that requests of concurrent sessions could add.

Every prompt is a path in one trie of atoms (a message header, a segment, an end marker, the
generation prompt), so a prompt that extends an earlier one costs only its new atoms, whatever
the conversation's length, and the longest prefix a request shares with the earlier ones is the
deepest node of its path that one of them reached. Which earlier requests count: a request of
the same group sent before it (the same session, or, for trace requests, every trace request
sent before it: the trace's order is assumed to be the order requests finish), and any request
of an earlier barrier level (a phase whose barrier every session passed). Requests of another
group at the same level run concurrently: what they could add is reported apart
(`Expectation.most`), never promised.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from workloadlang.plan.model import PMessage, Seg

HEADER_TOKENS = 3  # <|im_start|> role \n
END_TOKENS = 1  # <|im_end|>
GEN_PROMPT_TOKENS = 3  # <|im_start|> assistant \n
CALL_TOKENS = 3  # a tool call's markup: <tool_call> name ... </tool_call>
CALL_ARG_TOKENS = 1  # an argument's key ("path":)
END_ATOM = ("e",)
GEN_ATOM = ("h", "assistant")  # the generation prompt is the next assistant turn's header
NEVER = 1 << 62  # a level no request has
LATER = float("inf")  # a time no request is sent at
SOURCE_SLACK = 8  # atoms a named source may stop short of the shared prefix (`Prefix._source`)


def seg_identity(s: Seg) -> Hashable:
    if s.kind == "text":  # a long text is held once: its place in the table is its identity
        return ("t", s.text) if s.ref is None else ("T", s.ref)
    if s.kind == "filler":
        return ("f", s.key, s.tokens, s.needle_at)
    if s.kind == "call":
        return ("c", s.key, s.text, tuple((k, seg_identity(v)) for k, v in s.args))
    if s.content_only:  # the reply without its reasoning: not what was generated
        return (s.kind[0], s.key, s.synthetic, "content")
    return (s.kind[0], s.key, s.synthetic)


def message_atoms(m: PMessage) -> list[tuple[Hashable, int]]:
    """A message's atoms: its header, each segment, its end marker (identity, tokens); none
    for a `join` (it stands for the conversation before it)."""
    if m.role == "join":
        return []
    return [(("h", m.role), HEADER_TOKENS), *((seg_identity(s), s.tokens) for s in m.segs),
            (("e",), END_TOKENS)]


def message_weight(m: PMessage) -> int:
    if m.role == "join":
        return 0
    return HEADER_TOKENS + END_TOKENS + sum(s.tokens for s in m.segs)


Lane = tuple[tuple[int, int], ...]
"""The branches of parallel forks a request is in, outermost first: (fork, branch) pairs."""


def concurrent(a: Lane, b: Lane) -> bool:
    """Do requests in lanes `a` and `b` (of one session) run side by side: are they in
    different branches of one fork? Otherwise the one planned first finishes first."""
    for x, y in zip(a, b):
        if x != y:
            return x[0] == y[0]
    return False


class Node:
    """A trie node: one atom after its parent's path. `start`/`end`: token offsets of the atom
    in every prompt through the node. The other fields are the cache state (`Prefix.run`)."""

    __slots__ = ("parent", "start", "end", "kids", "serial", "tin", "tout", "epoch", "grp_src",
                 "min_level", "low_src", "lvl", "g1", "t1", "g2", "t2")

    def __init__(self, parent: Node | None, start: int, end: int, serial: int):
        self.parent, self.start, self.end, self.serial = parent, start, end, serial
        self.kids: dict[Hashable, Node] | None = None
        self.tin = self.tout = 0
        self.epoch = -1  # the last (level, group) block that reached it
        self.grp_src = -1  # a request of that block that reached it
        self.min_level = NEVER  # the lowest level of a request that reached it
        self.low_src = -1  # a request of that level that reached it
        # the groups that reached it at `lvl`: the one whose request could be sent earliest
        # (g1, at t1) and the earliest of the others (g2, at t2; LATER: none)
        self.lvl, self.t1, self.t2 = -1, LATER, LATER
        self.g1: Hashable | None = None
        self.g2: Hashable | None = None

    def other_than(self, group: Hashable) -> float:
        """The earliest a request of a group other than `group` that reached this node at its
        level `lvl` could be sent (LATER: none did)."""
        return self.t1 if self.g1 != group else self.t2

    def reached_by(self, group: Hashable, start: float) -> bool:
        """Count a request of `group` that could be sent at `start` at the earliest. Output:
        whether that changed what the node says."""
        if group == self.g1:
            if start >= self.t1:
                return False
            self.t1 = start
        elif group == self.g2:
            if start >= self.t2:
                return False
            self.t2 = start
            if self.t2 < self.t1:
                self.g1, self.t1, self.g2, self.t2 = self.g2, self.t2, self.g1, self.t1
        elif start < self.t1:
            self.g1, self.t1, self.g2, self.t2 = group, start, self.g1, self.t1
        elif start < self.t2:
            self.g2, self.t2 = group, start
        else:
            return False
        return True


class Trie:
    """Atom paths. `child` finds or makes a node; `nodes` counts them."""

    def __init__(self) -> None:
        self.root = Node(None, 0, 0, 0)
        self.nodes = 1

    def child(self, node: Node, ident: Hashable, weight: int) -> Node:
        kids = node.kids
        if kids is None:
            kids = node.kids = {}
        found = kids.get(ident)
        if found is None:
            found = kids[ident] = Node(node, node.end, node.end + weight, self.nodes)
            self.nodes += 1
        return found

    def walk(self, node: Node, atoms: Iterable[tuple[Hashable, int]]) -> Node:
        """The node at the end of `atoms` from `node` (`child` inlined: a trace's prompts are
        hundreds of thousands of atoms)."""
        for ident, weight in atoms:
            kids = node.kids
            if kids is None:
                kids = node.kids = {}
            found = kids.get(ident)
            if found is None:
                found = kids[ident] = Node(node, node.end, node.end + weight, self.nodes)
                self.nodes += 1
            node = found
        return node

    def dismantle(self) -> None:
        """Unlink every node from its parent and children: a trie no one uses is then freed at
        once, not left to the cyclic collector (a node and its parent name each other)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.kids:
                stack.extend(node.kids.values())
            node.kids = node.parent = None

    def number(self) -> None:
        """Give every node its DFS interval (`tin`, `tout`): a is an ancestor of b (or b)
        when a.tin <= b.tin < a.tout."""
        clock, stack = 0, [(self.root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                node.tout = clock
                continue
            node.tin = clock
            clock += 1
            stack.append((node, True))
            if node.kids:
                stack.extend((k, False) for k in node.kids.values())


def reaches(d: Node, e: Node | None) -> bool:
    """Does the path to `e` pass through `d`?"""
    return e is not None and d.tin <= e.tin < d.tout


class MessageNodes:
    """The trie node after each message (its conversation up to and including it), made once
    per message from the node of the message it follows."""

    def __init__(self, trie: Trie, messages: Sequence[PMessage]):
        self.trie, self.messages = trie, messages
        self.after: list[Node | None] = []
        self.idents: dict[int, Hashable] = {}  # id of a segment (all alive in messages) -> identity

    def atoms(self, m: PMessage) -> list[tuple[Hashable, int]]:
        """`message_atoms`, each shared segment's identity made once."""
        if m.role == "join":
            return []
        idents = self.idents
        out: list[tuple[Hashable, int]] = [(("h", m.role), HEADER_TOKENS)]
        for seg in m.segs:
            ident = idents.get(id(seg))
            if ident is None:
                ident = idents[id(seg)] = seg_identity(seg)
            out.append((ident, seg.tokens))
        out.append((END_ATOM, END_TOKENS))
        return out

    def node(self, i: int | None) -> Node:
        if i is None:
            return self.trie.root
        after = self.after
        if len(after) < len(self.messages):
            after.extend([None] * (len(self.messages) - len(after)))
        chain = []
        while i is not None and after[i] is None:
            chain.append(i)
            i = self.messages[i].after
        node = self.trie.root if i is None else after[i]
        assert node is not None  # the walk stopped at the root or at a node already made
        for j in reversed(chain):
            node = after[j] = self.trie.walk(node, self.atoms(self.messages[j]))
        return node

    def prompt(self, last: int | None) -> Node:
        """The node of a prompt ending with message `last`: then the generation prompt."""
        return self.trie.child(self.node(last), GEN_ATOM, GEN_PROMPT_TOKENS)

    def reply(self, last: int | None, rid: str, generated: int, partial: bool) -> Node:
        """The node of a prompt followed by its reply, as a replayed assistant turn starts."""
        head = self.trie.child(self.node(last), ("h", "assistant"), HEADER_TOKENS)
        return self.trie.child(head, ("p" if partial else "r", rid, False), generated)


@dataclass(slots=True)
class Stream:
    """One request for the cache model: its prompt's node, its reply's node (None when the
    reply is not kept), its group (a session, or every trace request), its barrier level, the
    requests to name first as the source (its conversation's last request, its lane's last),
    for a resend the request it re-sends, its lane (the parallel branches it is in: its
    group's requests in other branches of one fork run side by side with it), the earliest it
    can be sent (`start`: its session copy's start, s from the run's start) and its planned
    send time (`send_at`: an arrival's first request, a trace's; None: when what it waits for
    is done). A request of another group can have finished before it only when that one's
    `start` is before its `send_at`."""

    prompt: Node
    reply: Node | None
    group: Hashable
    level: int
    candidates: tuple[int, ...] = ()
    resend_of: int | None = None
    lane: Lane = ()
    start: float = 0.0
    send_at: float | None = None


@dataclass(slots=True)
class Expectation:
    """Expected cached tokens (`tokens`, from `source`) and, when larger, what requests of
    concurrent groups could make it (`most`)."""

    tokens: int = 0
    source: int | None = None
    most: int | None = None


def order_of(streams: Sequence[Stream]) -> list[int]:
    """The order the model replays requests in: level by level, each group's requests
    together (groups in order of their first request), plan order within a group."""
    rank: dict[Hashable, int] = {}
    for s in streams:
        rank.setdefault(s.group, len(rank))
    return sorted(range(len(streams)), key=lambda i: (streams[i].level, rank[streams[i].group], i))


class Prefix:
    """The perfect-cache pass over a finished trie."""

    def __init__(self, trie: Trie, streams: Sequence[Stream]):
        self.trie, self.streams = trie, streams

    def run(self) -> list[Expectation]:
        """Output: one `Expectation` per stream, in the streams' order."""
        if any(s.candidates or s.resend_of is not None for s in self.streams):
            self.trie.number()  # for `reaches`, which only named sources need
        streams, out = self.streams, [Expectation() for _ in self.streams]
        order = order_of(streams)
        epoch, key, level_start = -1, None, 0
        for pos, i in enumerate(order):
            s = streams[i]
            if (s.level, s.group) != key:
                if key is not None and s.level != key[0]:
                    self._most(order[level_start:pos], out)
                    level_start = pos
                key, epoch = (s.level, s.group), epoch + 1
            out[i] = self._expect(i, s, epoch)
            self._stamp(s.prompt, i, s, epoch)
            if s.reply is not None:
                self._stamp(s.reply, i, s, epoch)
        self._most(order[level_start:], out)
        self._sibling_most(out)
        return out

    def _expect(self, i: int, s: Stream, epoch: int) -> Expectation:
        """The deepest node of the prompt's path that a request certainly finished before it
        reached, and a request that reached it (`_source`). In a parallel branch, a node its
        group reached only in another branch of its fork is not certain."""
        n, level, root = s.prompt, s.level, self.trie.root
        if s.lane:
            streams = self.streams
            while n is not root and n.min_level >= level and (
                    n.epoch != epoch or concurrent(streams[n.grp_src].lane, s.lane)):
                n = n.parent or root  # below the root a node has a parent
        while n is not root and n.min_level >= level and n.epoch != epoch:
            n = n.parent or root
        if n is root:
            return Expectation()
        return Expectation(n.end, self._source(n, s, epoch))

    def _source(self, d: Node, s: Stream, epoch: int) -> int:
        """The request to name as the source of the prefix ending at `d`: the request it
        re-sends, else its conversation's or its session's last request when one of them
        shares all of it or all but its last few atoms (the deepest; the first on a tie: a
        turn names the turn before it even when another request also shared the new user
        header), else a request that reached `d`."""
        best, best_end, root = -1, -1, self.trie.root
        named = ((s.resend_of,) if s.resend_of is not None else ()) + s.candidates
        for c in named:
            cs, n = self.streams[c], d
            for _ in range(SOURCE_SLACK + 1):
                if reaches(n, cs.prompt) or reaches(n, cs.reply):
                    if n.end > best_end:
                        best, best_end = c, n.end
                    break
                if n.parent is None or n.parent is root:
                    break
                n = n.parent
        if best >= 0:
            return best
        return d.grp_src if d.epoch == epoch else d.low_src

    def _stamp(self, n: Node | None, i: int, s: Stream, epoch: int) -> None:
        """Mark the path to `n` as reached by request i, upwards until a node already says all
        of it (its ancestors then say it too)."""
        level, group, lane, streams = s.level, s.group, s.lane, self.streams
        while n is not None:
            changed = False
            if n.epoch != epoch:
                n.epoch, n.grp_src, changed = epoch, i, True
            elif lane and concurrent(streams[n.grp_src].lane, lane):
                # a request of another branch reached it: for what comes later this one says
                # as much (whatever follows it in its branch, and after the join)
                n.grp_src, changed = i, True
            if n.min_level > level:
                n.min_level, n.low_src, changed = level, i, True
            if n.lvl != level:
                n.lvl, n.g1, n.t1, n.g2, n.t2 = level, group, s.start, None, LATER
                changed = True
            elif n.reached_by(group, s.start):
                changed = True
            if not changed:
                return
            n = n.parent

    def _most(self, level_order: list[int], out: list[Expectation]) -> None:
        """Once a level is done: for each of its requests, the deepest node of its path that a
        request of another group at the same level reached, when deeper than the expectation:
        one that could be sent before it (a request planned for a time cannot be served what
        only requests that start at or after that time send)."""
        root = self.trie.root
        for i in level_order:
            s, e = self.streams[i], out[i]
            n, before = s.prompt, LATER if s.send_at is None else s.send_at
            # every node of its path was reached at this level (by itself at least)
            while n is not root and n.end > e.tokens and not (
                    n.min_level < s.level or n.other_than(s.group) < before):
                n = n.parent or root
            if n.end > e.tokens:
                e.most = n.end

    def _sibling_most(self, out: list[Expectation]) -> None:
        """For each request in a branch of a parallel fork: the deepest node of its path that a
        request in another branch of that fork reached, when deeper than what it expects (they
        are in flight together: either may finish first)."""
        forks: dict[int, list[tuple[int, int]]] = {}
        for i, s in enumerate(self.streams):
            for fork, branch in s.lane:
                forks.setdefault(fork, []).append((i, branch))
        root = self.trie.root
        for members in forks.values():
            marks: dict[int, tuple[int, bool]] = {}  # node serial -> (a branch, several)
            for i, branch in members:
                s = self.streams[i]
                _mark(marks, s.prompt, branch)
                _mark(marks, s.reply, branch)
            for i, _ in members:
                e, n = out[i], self.streams[i].prompt
                while n is not root and n.end > e.tokens and not marks.get(n.serial,
                                                                            (0, False))[1]:
                    n = n.parent or root
                if n.end > max(e.tokens, e.most or 0):
                    e.most = n.end


def _mark(marks: dict[int, tuple[int, bool]], n: Node | None, branch: int) -> None:
    """Mark the path to `n` as reached by `branch`, upwards until a node says so already."""
    while n is not None:
        found = marks.get(n.serial)
        if found is None:
            marks[n.serial] = (branch, False)
        elif found[0] != branch and not found[1]:
            marks[n.serial] = (found[0], True)
        else:
            return
        n = n.parent
