"""The grammar's parser and its syntax errors.

Input: `.wl` text (through `parser()`, the process-wide Lark LALR parser over
`grammars/workload.lark`) and, for an error, Lark's exception with the text and the file's name.
Output: Lark's tree (to `workloadlang.parse`, which lowers it to the IR) or one `Diagnostic`
(WL101-WL105) that names what was expected in human terms, with a did-you-mean for a misspelt
keyword and where an unclosed `{` was opened.

Keywords are reserved only where they can stand (`_WordsInContext`): a word means what the
parser can take where it stands. The Lark parser is built once per process and its tables are
cached on disk by Lark (`cache=True`), so start-up stays fast.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lexer import Lexer
from lark.parsers.lalr_analysis import Shift

from workloadlang import ir
from workloadlang.diagnostics import Diagnostic, closest, error
from workloadlang.resources import read_grammar

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1)
def parser() -> Lark:
    """The process-wide Lark parser (LALR tables loaded from Lark's on-disk cache when present)."""
    lark = Lark(read_grammar(), parser="lalr", lexer="basic", propagate_positions=True,
                maybe_placeholders=True, cache=True)
    keywords = {t.name: t.pattern.value for t in lark.terminals
                if t.pattern.type == "str" and _WORD.fullmatch(t.pattern.value)}
    lark.parser.lexer = _WordsInContext(lark.parser.lexer, keywords)
    return lark


class _WordsInContext(Lexer):
    """Lark's basic lexer, plus context: a word means what the parser can take where it stands.

    The lexer reads every word whole (`integer` is never `int` + `eger`) and types a keyword as
    that keyword. Keywords are reserved only where they can stand, so a keyword the parser cannot
    shift here (after the reductions it implies) becomes a NAME when a name can: a param, label
    or option may be called `settle`, `label` or `max_tokens`. Likewise `if(` is a call only
    where an expression can start; in statement position it is the keyword `if`.
    """

    def __init__(self, inner: Lexer, keywords: dict[str, str]):
        self.inner = inner
        self.keywords = keywords  # terminal name -> the word
        self.by_word = {word: name for name, word in keywords.items()}

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        for tok in self.inner.lex(lexer_state, parser_state):
            if tok.type in self.keywords or tok.type == "CALL":
                tok = self.in_context(tok, parser_state.parse_conf.states,
                                      parser_state.state_stack)
            yield tok

    def in_context(self, tok: Token, states: dict, stack: list[int]) -> Token:
        if _can_shift(states, stack, tok.type):
            return tok
        for other in (self.by_word.get(tok.value), "NAME"):
            if other and other != tok.type and _can_shift(states, stack, other):
                return Token.new_borrow_pos(other, tok.value, tok)
        return tok  # a syntax error either way: report the token as lexed


def _can_shift(states: dict, state_stack: list[int], terminal: str) -> bool:
    """Whether the LALR parser (`states`: its action table) would shift `terminal` now, after
    the reductions it implies."""
    stack = list(state_stack)
    while True:
        action = states[stack[-1]].get(terminal)
        if action is None:
            return False
        if action[0] is Shift:
            return True
        rule = action[1]
        if rule.expansion:
            del stack[-len(rule.expansion):]
        stack.append(states[stack[-1]][rule.origin.name][1])


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
        prev, keyword = misspelt
        return error("WL101", f"unexpected name `{prev.value}`", token_span(prev, filename),
                     f"did you mean `{keyword}`?")
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
    recent: deque[tuple[list[int], Token]] = deque(maxlen=_LOOKBACK)
    try:
        cursor = parser().parse_interactive(text)
        for tok in cursor.iter_parse():  # yields each token before feeding it
            if tok.start_pos >= exc.token.start_pos:
                break
            recent.append((list(cursor.parser_state.state_stack), tok))
    except UnexpectedInput:
        pass  # the lexer may fail on the error token itself before yielding it: the same error
    states = cursor.parser_state.parse_conf.states
    for stack, tok in reversed(recent):
        possible = {t for t in states[stack[-1]] if t.isupper() and _can_shift(states, stack, t)}
        keyword = tok.type == "NAME" and _keyword_like(tok.value, possible - {"NAME"})
        if keyword:
            return tok, keyword
    return None


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
    try:
        for tok in parser().parse_interactive(text).iter_parse():
            if tok.start_pos >= exc.token.start_pos:
                break
            last = tok
    except UnexpectedInput:
        pass
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
        word = re.match(r"[\w.%]+", rest).group(0)
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
    return ir.Span(file=filename, line=tok.line, col=tok.column, end_line=tok.end_line,
                   end_col=tok.end_column)


def _end_span(text: str, filename: str) -> ir.Span:
    """Just past the last non-blank character: where the missing text should go."""
    body = text.rstrip()
    line = body.count("\n") + 1
    col = len(body) - (body.rfind("\n") + 1) + 1
    return _point(filename, line, col)
