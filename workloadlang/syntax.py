"""The grammar's parser and its syntax errors.

Input: `.wl` text. Output: Lark's tree of it (`parse_tree`, to `workloadlang.parse`, which lowers
it to the IR), or, for a syntax error, Lark's exception, which `syntax_diagnostic` turns into one
`Diagnostic` (WL101-WL105) that names what was expected in human terms, with a did-you-mean for
a misspelt keyword and where an unclosed `{` was opened.

Keywords are reserved only where they can stand: a word means what the parser can take where it
stands (`_candidates`). The parse steps Lark's interactive parser through the text
(`parse_interactive(text).iter_parse()`) and types each keyword by what the parser lists next
(`choices`), or, where that guess failed, by trying each type on a copy (`copy`, `feed_token`):
Lark's documented surface only (docs/architecture.md, "The parser and Lark"). The Lark parser is
built once per process and its tables are cached on disk by Lark (`cache=True`), so start-up
stays fast.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from workloadlang import ir
from workloadlang.diagnostics import Diagnostic, closest, error
from workloadlang.resources import read_grammar

if TYPE_CHECKING:  # where Lark's API reference documents it; `lark` does not re-export it
    from lark.parsers.lalr_interactive_parser import InteractiveParser

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1)
def parser() -> Lark:
    """The process-wide Lark parser (LALR tables loaded from Lark's on-disk cache when present).
    Its own `parse` reserves every keyword everywhere: parse with `parse_tree`."""
    return Lark(read_grammar(), parser="lalr", lexer="basic", propagate_positions=True,
                maybe_placeholders=True, cache=True)


def parse_tree(text: str) -> Tree:
    """Lark's tree of `text`, each word typed where it stands (`_candidates`); raises Lark's
    `UnexpectedInput` (an `UnexpectedToken` carries the parser at the failure, as from Lark's
    own `parse`, so its `accepts` names what fits)."""
    words = _ByChoices()
    try:
        return _parse(text, words)
    except UnexpectedToken as exc:
        if exc.token is not words.doubt:
            raise  # every word before it was typed as `_ByTrial` types it: the same error
    # the word it stopped at may be typed otherwise where it stands: type each word exactly
    return _parse(text, _ByTrial())


def _parse(text: str, words: _Words) -> Tree:
    """Lark's tree of `text`, its words typed by `words`; raises Lark's `UnexpectedInput`."""
    cursor = parser().parse_interactive(text)
    try:
        for _ in _typed(cursor, words):
            pass
    except UnexpectedToken as exc:
        exc.interactive_parser = cursor  # what Lark's own `parse` leaves on the error
        raise
    return cursor.resume_parse()


def _typed(cursor: InteractiveParser, words: _Words) -> Iterator[Token]:
    """Each token of the text of the interactive parser `cursor` (`parse_interactive(text)`)
    before `cursor` takes it, a keyword or a call typed by `words` where it stands. Raises Lark's
    `UnexpectedInput` where the text stops being the language."""
    keywords = _keywords()
    taken = None
    for tok in cursor.iter_parse():  # yields each token, then feeds it to `cursor`
        if taken is not None:
            words.taken(taken)
        if tok.type == "CALL" or tok.type in keywords:
            tok.type = words.type_of(cursor, tok)
        yield tok
        taken = tok


def _candidates(tok: Token) -> tuple[str, ...]:
    """The types a keyword or call `tok` may take, in order of preference.

    The lexer reads every word whole (`integer` is never `int` + `eger`) and types a keyword as
    that keyword. Keywords are reserved only where they can stand, so a keyword the parser cannot
    shift where it stands (after the reductions it implies) becomes a NAME when a name can: a
    param, label or option may be called `settle`, `label` or `max_tokens`. Likewise `if(` is a
    call only where an expression can start; in statement position it is the keyword `if`.
    Where none fits it is a syntax error either way, reported on the token as lexed."""
    others = (_keywords_by_word().get(tok.value), "NAME")
    return (tok.type, *(t for t in others if t and t != tok.type))


class _Words(Protocol):
    """How a parse types each keyword or call where it stands (`_ByChoices`, `_ByTrial`)."""

    def type_of(self, cursor: InteractiveParser, tok: Token) -> str:
        """The type of `tok` (one of `_candidates`), the parse's parser `cursor` before it."""

    def taken(self, tok: Token) -> None:
        """The parse's parser took `tok` (typed)."""


class _ByChoices:
    """Types a word by the parser's table alone: the first candidate with an action where the
    parser stands (`choices`). An LALR table may list a terminal that then fails, after the
    reductions it implies, where another candidate would not: a guess (`doubt`) that only
    matters if the parse stops at it. A parse that does not is the one `_ByTrial` gives, at the
    cost of Lark's own `parse`."""

    def __init__(self) -> None:
        self.doubt: Token | None = None  # the last word typed by a guess

    def type_of(self, cursor: InteractiveParser, tok: Token) -> str:
        choices = cursor.choices()
        listed = [t for t in _candidates(tok) if t in choices]
        if listed in ([], [tok.type]):
            return tok.type
        self.doubt = tok
        return listed[0]

    def taken(self, tok: Token) -> None:
        """Nothing to follow: `type_of` reads the parse's own parser."""


class _ByTrial:
    """Types a word exactly: the first candidate that a copy of the parser takes. The copies are
    of a parser of its own (`recognizer`, given the tokens the parse takes), since a copy shares
    its values and a trial may change them: the recognizer's tree is never read."""

    def __init__(self) -> None:
        self.recognizer = parser().parse_interactive()

    def type_of(self, cursor: InteractiveParser, tok: Token) -> str:
        choices = self.recognizer.choices()
        listed = [t for t in _candidates(tok) if t in choices]
        if listed in ([], [tok.type]):
            return tok.type  # nothing else may stand here: the token as lexed, right or wrong
        return next((t for t in listed if self.takes(tok, t)), tok.type)

    def takes(self, tok: Token, type_: str) -> bool:
        """Whether the recognizer can be fed `tok` as a `type_` (a copy of it is)."""
        try:
            self.recognizer.copy(deepcopy_values=False).feed_token(
                Token.new_borrow_pos(type_, tok.value, tok))
        except UnexpectedToken:
            return False
        return True

    def taken(self, tok: Token) -> None:
        self.recognizer.feed_token(tok)


@functools.lru_cache(maxsize=1)
def _keywords() -> dict[str, str]:
    """Terminal name -> the word, for each keyword of the grammar (a literal that is a word)."""
    return {name: p.value for name, p in _patterns().items()
            if p.type == "str" and _WORD.fullmatch(p.value)}


@functools.lru_cache(maxsize=1)
def _keywords_by_word() -> dict[str, str]:
    """The word -> its keyword's terminal name."""
    return {word: name for name, word in _keywords().items()}


# ---------------------------------------------------------------- syntax errors

_LOOKBACK = 3  # how many tokens before a syntax error may hold the misspelt keyword
_GROUPS: tuple[tuple[str, frozenset[str], int], ...] = (
    ("an expression", frozenset({"CALL", "REF", "NUMBER", "STRING", "TRUE", "FALSE", "NULL",
                                 "_LPAR", "_LSQB", "_LBRACE", "MINUS", "NOT"}), 6),
    ("an operator", frozenset({"OR", "AND", "EQEQ", "NE", "LT", "LE", "GT", "GE", "PLUS",
                               "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT"}), 4),
    ("a statement", frozenset({"_SYSTEM", "_USER", "_ASSISTANT", "_TOOL", "_REPLY", "_PROBE",
                               "_RESEND",
                               "_WAIT", "_TURN", "_PHASE", "_FOR", "_REPEAT", "_GROW", "_SPAWN",
                               "_FRESH", "_IF"}), 10),
    ("a setting", frozenset({"_CONCURRENCY", "_SETTLE", "_TIMEOUT", "_FAIL_FAST", "_HIT_RATIO",
                             "_MAX_CONTEXT", "_DURATION", "_WARMUP", "_COOLDOWN"}), 6),
)
"""Sets of terminals named as one thing in "expected ..." when at least N of them are expected."""
_LITERALS = {"NAME": "a name", "CALL": "a function call", "REF": "a `$reference`",
             "NUMBER": "a number", "STRING": "a string", "$END": "the end of the file"}


def syntax_diagnostic(exc: UnexpectedInput, text: str, filename: str) -> Diagnostic:
    """A Lark parse error as a diagnostic that names what was expected in human terms."""
    if isinstance(exc, UnexpectedToken):
        return _unexpected_token(exc, text, filename)
    if isinstance(exc, UnexpectedCharacters):
        return _unexpected_char(exc, text, filename)
    return error("WL101", "syntax error", _point(filename, exc.line, exc.column))


def _unexpected_token(exc: UnexpectedToken, text: str, filename: str) -> Diagnostic:
    tok = exc.token
    expected = set(exc.accepts or exc.expected) - {"_SEMI"}
    wanted = "expected " + describe_expected(expected)
    if tok.type == "$END":
        return error("WL102", f"unexpected end of file; {wanted}", _end_span(text, filename),
                     _unclosed_hint(text))
    span = token_span(tok, filename)
    message = f"unexpected {_describe_token(tok)}; {wanted}"
    suggestion = _keyword_like(tok.value, expected) if _WORD.fullmatch(tok.value) else None
    if suggestion:
        return error("WL101", message, span, f"did you mean `{suggestion}`?")
    keyword = _selector_keyword(exc, text)
    if keyword is not None:
        return _keyword_in_selector(keyword, filename)
    misspelt = _misspelt_previous(exc, text)
    if misspelt:
        prev, meant = misspelt
        return error("WL101", f"unexpected name `{prev.value}`", token_span(prev, filename),
                     f"did you mean `{meant}`?")
    return error("WL101", message, span, _call_hint(tok, text, expected))


def _keyword_like(word: str, expected: set[str]) -> str | None:
    """The expected keyword that `word` is probably a misspelling of."""
    return closest(word, [_patterns()[n].value for n in expected if _is_keyword(n)])


@functools.lru_cache(maxsize=1)
def _patterns() -> dict[str, Any]:
    """Terminal name -> Lark pattern (`.type` is "str" for a literal, "re" for a regex)."""
    return {t.name: t.pattern for t in parser().terminals}


def _misspelt_previous(exc: UnexpectedToken, text: str) -> tuple[Token, str] | None:
    """(token, keyword) when one of the few names just before the error is probably a misspelt
    keyword that was possible there: `sesion main {` fails at `main`, and `g: overal ttft{x}`
    at `{`, but the mistake is `sesion` or `overal`."""
    # each name with a copy of the parser as it stood before it; `accepts` feeds no values, so
    # the copies may share them with the parser that goes on
    recent: deque[tuple[Token, InteractiveParser | None]] = deque(maxlen=_LOOKBACK)
    for cursor, tok in _tokens_before(text, exc.token.start_pos):
        recent.append((tok, cursor.copy(deepcopy_values=False) if tok.type == "NAME" else None))
    for tok, before in reversed(recent):
        keyword = before is not None and _keyword_like(tok.value, before.accepts() - {"NAME"})
        if keyword:
            return tok, keyword
    return None


def _tokens_before(text: str, end: int) -> Iterator[tuple[InteractiveParser, Token]]:
    """(the interactive parser just before the token, the token) for each token of `text` that
    starts before the offset `end`, typed exactly (`_ByTrial`)."""
    cursor = parser().parse_interactive(text)
    try:
        for tok in _typed(cursor, _ByTrial()):
            if tok.start_pos is None or tok.start_pos >= end:  # a lexer's token has one
                return
            yield cursor, tok
    except UnexpectedInput:
        return  # the lexer may fail on the error token itself before yielding it: the same error


SELECTOR_KEYWORDS = {"_FIRST": "`first N` (the first N of the selection)",
                     "_LAST": "`last N` (the last N of the selection)",
                     "_LABEL": "`label=NAME`", "_PHASE": "`phase=NAME`",
                     "_SESSION": "`session=NAME`"}
"""The words a selector reads as its own keywords, never as a bare label or phase name."""


def _selector_keyword(exc: UnexpectedToken, text: str) -> Token | None:
    """The selector keyword a selector item stopped at, when the error is a `,` or `}` right
    after one (`ttft{first, warm}`: a label named `first`), else None."""
    if exc.token.type not in ("_COMMA", "_RBRACE"):
        return None
    last = None
    for _, token in _tokens_before(text, exc.token.start_pos):
        last = token
    if last is None or last.type not in SELECTOR_KEYWORDS:
        return None
    expected = set(exc.accepts or exc.expected)
    # `first`/`last` wait for their count, `label`/`phase`/`session` for `=` (elsewhere, as in
    # `reply 4 label }`, a name is what is missing)
    wanted = "NUMBER" in expected if last.type in ("_FIRST", "_LAST") else expected == {"_EQ"}
    return last if wanted else None


def _keyword_in_selector(tok: Token, filename: str) -> Diagnostic:
    """WL101 for a selector keyword written as a bare name: it says the word is a keyword
    and how to select a label or phase of that name."""
    word = tok.value
    return error("WL101", f"`{word}` is a selector keyword, {SELECTOR_KEYWORDS[tok.type]}, not "
                 "a label or phase name here", token_span(tok, filename),
                 f"a label or phase named `{word}` is selected with `label={word}` or "
                 f"`phase={word}` (docs/language.md, Gates: the words a bare name cannot be)")


def _call_hint(tok: Token, text: str, expected: set[str]) -> str | None:
    if tok.type == "NAME" and "CALL" in expected and text[tok.end_pos:].lstrip().startswith("("):
        return f"write a call without a space before `(`: `{tok.value}(...)`"
    return None


def describe_expected(names: set[str]) -> str:
    """`{"_LBRACE", "NAME"}` -> "`{` or a name"."""
    names = set(names)
    parts: list[str] = []
    for label, members, least in _GROUPS:
        if len(names & members) >= least:
            parts.append(label)
            names -= members
    parts += [_describe_terminal(n) for n in sorted(names, key=_terminal_rank)]
    if not parts:
        return "nothing more"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def _terminal_rank(name: str) -> tuple[int, int]:
    """Keywords first, then names and literals, then punctuation, then the end of the file."""
    names = list(_patterns())
    index = names.index(name) if name in names else len(names)
    kind = 3 if name == "$END" else 1 if name in _LITERALS else 0 if _is_keyword(name) else 2
    return kind, index


def _is_keyword(name: str) -> bool:
    pattern = _patterns().get(name)
    return pattern is not None and pattern.type == "str" and bool(_WORD.fullmatch(pattern.value))


def _describe_terminal(name: str) -> str:
    if name in _LITERALS:
        return _LITERALS[name]
    pattern = _patterns().get(name)
    return f"`{pattern.value}`" if pattern is not None and pattern.type == "str" else name.lower()


def _describe_token(tok: Token) -> str:
    kinds = {"NAME": "name ", "NUMBER": "number ", "CALL": "call ", "STRING": "string "}
    shown = f"`{tok.value}(`" if tok.type == "CALL" else f"`{tok.value}`"
    return kinds.get(tok.type, "") + shown


def _unexpected_char(exc: UnexpectedCharacters, text: str, filename: str) -> Diagnostic:
    char, rest = exc.char, text[exc.pos_in_stream:]
    if char == '"':
        span = _point(filename, exc.line, exc.column, len(rest.split("\n", 1)[0]))
        return error("WL104", "unterminated string", span,
                     'a string ends with `"` on the same line; write `\\n` for a line break')
    if char.isdigit():
        number = re.match(r"[\w.%]+", rest)  # matches: `rest` starts with a digit
        word = number.group(0) if number else char
        return error("WL105", f"bad number `{word}`",
                     _point(filename, exc.line, exc.column, len(word)),
                     "a number may end in one unit: k, M, Ki, Mi (counts), ms, s, min "
                     "(durations) or % (ratios)")
    hint = "a reference is `$` and a name, like `$tokens`" if char == "$" else None
    shown = f"`{char}`" if char.isprintable() and not char.isspace() else f"U+{ord(char):04X}"
    return error("WL103", f"unexpected character {shown}",
                 _point(filename, exc.line, exc.column), hint)


_BRACES = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|#[^\n]*|[{}]')


def _unclosed_hint(text: str) -> str | None:
    """Where the innermost `{` that is never closed was opened, if there is one."""
    opened: list[int] = []
    for m in _BRACES.finditer(text):
        if m.group(0) == "{":
            opened.append(m.start())
        elif m.group(0) == "}" and opened:
            opened.pop()
    if not opened:
        return None
    return f"the `{{` on line {text.count(chr(10), 0, opened[-1]) + 1} is never closed"


def _point(filename: str, line: int, col: int, length: int = 1) -> ir.Span:
    return ir.Span(file=filename, line=line, col=col, end_line=line, end_col=col + max(length, 1))


def token_span(tok: Token, filename: str) -> ir.Span:
    """Where a token the lexer made is (Lark's type allows its positions to be None)."""
    line, col, end_line, end_col = tok.line, tok.column, tok.end_line, tok.end_column
    assert line is not None and col is not None and end_line is not None and end_col is not None
    return ir.Span(file=filename, line=line, col=col, end_line=end_line, end_col=end_col)


def _end_span(text: str, filename: str) -> ir.Span:
    """Just past the last non-blank character: where the missing text should go."""
    body = text.rstrip()
    line = body.count("\n") + 1
    col = len(body) - (body.rfind("\n") + 1) + 1
    return _point(filename, line, col)
