"""Parse `.wl` text into the typed IR.

Input: the text of a `.wl` file and its name (used in spans). Output: an `ir.Workload` with a
`Span` on every node. A syntax error raises `WorkloadError` with one diagnostic (WL1xx; parsing
stops at the first); structural problems found while lowering (a clause given twice, a bad string
escape, an aggregation of something that is not one metric) are all collected and raised
together. Semantic checks are `workloadlang.check`'s job.

The grammar is `grammars/workload.lark`; its parser and the syntax errors are
`workloadlang.syntax`'s.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from lark import Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from workloadlang import bounds, ir
from workloadlang.diagnostics import Diagnostic, WorkloadError, error, sort_diagnostics
from workloadlang.evaluate import split_number
from workloadlang.syntax import parse_tree, parser, syntax_diagnostic, token_span

__all__ = ["FLAGS", "parse", "parser"]

FLAGS = frozenset({"warm", "cold", "hit", "miss", "aborted", "ok", "probe", "error",
                   "isolated"})
"""Bare selector words that filter by outcome rather than naming a label, phase or session."""


def parse(text: str, filename: str) -> ir.Workload:
    """The IR of one `.wl` file; raises `WorkloadError` for syntax and structural errors, and for
    a text beyond `bounds` (too large, too many tokens, nested too deeply)."""
    text = text[1:] if text.startswith("\ufeff") else text
    tree = _syntax_tree(text, filename)
    lower = _Lower(filename, text)
    try:
        workload = lower.transform(tree)
    except VisitError as exc:  # a bug in lowering, not in the file: let it surface as itself
        raise exc.orig_exc from exc
    if lower.diags:
        raise WorkloadError(sort_diagnostics(lower.diags))
    return workload


def _syntax_tree(text: str, filename: str) -> Any:
    """Lark's tree of `text`, within `bounds`; raises `WorkloadError` with one diagnostic."""
    too_large = bounds.check_text(text, filename) or _too_many_tokens(text, filename)
    if too_large:
        raise WorkloadError([too_large])
    try:
        tree = parse_tree(text)
    except UnexpectedInput as exc:
        raise WorkloadError([syntax_diagnostic(exc, text, filename)]) from None
    deep = bounds.too_deep(tree, filename)
    if deep:
        raise WorkloadError([deep])
    return tree


def _too_many_tokens(text: str, filename: str) -> Diagnostic | None:
    """`bounds.too_many_tokens` over the plain lexer (no parser: cheap); a character the lexer
    cannot take ends the count, and the parser reports it. A text no longer than the limit is
    not lexed for it: every token is at least one character (Lark refuses an empty match)."""
    if len(text) <= bounds.MAX_TOKENS:
        return None
    tokens = parser().lex(text)
    try:
        return bounds.too_many_tokens(tokens, filename)
    except UnexpectedInput:
        return None


# ---------------------------------------------------------------- lowering: tree -> IR

class _Clause(NamedTuple):
    """An optional part of a construct (`label x`, `abort after 5`, a setting), before it is
    placed in its IR field; `key` says which field."""

    key: str
    value: Any
    span: ir.Span


_COMMENT = re.compile(r"#[^\n]*")  # no string can stand in a gate expression
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
_ESCAPE = re.compile(r"\\(.)")
_FORMAT = re.compile(r"\{\$([A-Za-z_][A-Za-z0-9_]*)\}")
"""`{$name}` in a string literal: the value of `$name` as text (`str($name)`)."""
_REPEATABLE = frozenset({"expect", "options", "params", "calibrate", "text", "dataset",
                         "session", "gates", "report", "slo"})
_SETTINGS = frozenset(ir.Settings.model_fields) - {"span"}


def _keyword(self: _Lower, meta: Any, children: list) -> str:
    return " ".join(str(c) for c in children)


def _clause(key: str, how: str) -> Any:
    """A lowering method returning `_Clause(key, ...)` of its first child as is ("value"), as a
    name ("word") or an unescaped string ("string"), or of all its children ("all")."""
    def lower(self: _Lower, meta: Any, c: list) -> _Clause:
        if how == "all":
            return _Clause(key, tuple(c), self.span(meta))
        value = self.string(c[0]) if how == "string" else str(c[0]) if how == "word" else c[0]
        return _Clause(key, value, self.span(meta))
    return lower


@v_args(meta=True)
class _Lower(Transformer):
    """Builds IR nodes bottom-up; problems go to `self.diags` (lowering always finishes)."""

    def __init__(self, filename: str, text: str = ""):
        super().__init__()
        self.filename, self.text = filename, text
        self.diags: list[Diagnostic] = []

    ptype = setting_name = calib_name = role = stop_on = severity = _keyword
    fmt_name = by_key = sel_key = _keyword
    # Clauses that only carry one value to an IR field.
    pdefault = _clause("default", "value")
    prange = _clause("range", "value")
    cal_tokens = _clause("tokens", "value")
    cal_repeat = _clause("repeat", "value")
    abort = _clause("abort", "value")
    resend_max = _clause("max_tokens", "value")
    until = _clause("until", "value")
    as_name = _clause("as", "word")
    label = _clause("label", "word")
    spawn_mode = _clause("mode", "word")
    params = _clause("params", "all")
    gates = _clause("gates", "all")
    report = _clause("report", "all")
    doc = pdoc = _clause("doc", "string")
    psweep = _clause("sweep", "value")

    def isolated(self, meta: Any, c: list) -> _Clause:
        return _Clause("isolated", True, self.span(meta))

    def mode(self, meta: Any, c: list) -> _Clause:
        """`replay`, `replay content` (mode `content`), `synthetic` or `drop`."""
        word = "content" if len(c) > 1 and c[1] is not None else str(c[0])
        return _Clause("mode", word, self.span(meta))

    # -- helpers

    def span(self, meta: Any) -> ir.Span:
        return ir.Span(file=self.filename, line=meta.line, col=meta.column,
                       end_line=meta.end_line, end_col=meta.end_column)

    def tspan(self, tok: Token) -> ir.Span:
        return token_span(tok, self.filename)

    def gather(self, clauses: list[_Clause]) -> dict[str, Any]:
        """Clauses by key: repeatable ones as lists, others once (a second one is WL107)."""
        found: dict[str, Any] = {}
        for c in clauses:
            if c.key in _REPEATABLE:
                found.setdefault(c.key, []).append(c.value)
            elif c.key in found:
                self.diags.append(error("WL107", f"`{c.key}` is given twice", c.span,
                                        "keep only one"))
            else:
                found[c.key] = c.value
        return found

    def string(self, tok: Token) -> str:
        def unescape(m: re.Match) -> str:
            if m.group(1) not in _ESCAPES:
                self.diags.append(error("WL106", f"unknown escape `\\{m.group(1)}` in a string",
                                        self.tspan(tok), 'the escapes are \\n \\t \\" and \\\\'))
            return _ESCAPES.get(m.group(1), m.group(1))
        return _ESCAPE.sub(unescape, tok.value[1:-1])

    # -- the workload

    def start(self, meta: Any, c: list) -> ir.Workload:
        return c[0]

    def workload(self, meta: Any, c: list) -> ir.Workload:
        items = c[1:]
        found = self.gather(items)
        settings = {k: v for k, v in found.items() if k in _SETTINGS}
        first = min((i.span for i in items if i.key in _SETTINGS), default=None,
                    key=lambda s: (s.line, s.col))
        return ir.Workload(
            name=str(c[0]), doc=found.get("doc", ""), settings=ir.Settings(**settings, span=first),
            params=_flat(found.get("params", [])), options=_flat(found.get("options", [])),
            calibrations=tuple(found.get("calibrate", [])), texts=tuple(found.get("text", [])),
            datasets=tuple(found.get("dataset", [])), sessions=tuple(found.get("session", [])),
            gates=_flat(found.get("gates", [])), report=_flat(found.get("report", [])),
            slo=_flat(found.get("slo", [])), span=self.span(meta))

    def param(self, meta: Any, c: list) -> ir.Param:
        name, ptype, is_list, *clauses = c
        found = self.gather(clauses)
        return ir.Param(name=str(name), type=ptype, is_list=is_list is not None,
                        default=found.get("default"), range=found.get("range"),
                        choices=found.get("choices", ()), doc=found.get("doc", ""),
                        sweep=found.get("sweep"), span=self.span(meta))

    def range(self, meta: Any, c: list) -> ir.Range:
        return ir.Range(low=c[0], high=c[1], span=self.span(meta))

    def pchoices(self, meta: Any, c: list) -> _Clause:
        return _Clause("choices", tuple(self.string(t) for t in c), self.span(meta))

    def setting(self, meta: Any, c: list) -> _Clause:
        return _Clause(c[0], c[1], self.span(meta))

    def options(self, meta: Any, c: list) -> _Clause:
        return _Clause("options", c[0].items, self.span(meta))

    def slo(self, meta: Any, c: list) -> _Clause:
        return _Clause("slo", c[0].items, self.span(meta))

    def object(self, meta: Any, c: list) -> ir.ObjExpr:
        return ir.ObjExpr(items=tuple(c), span=self.span(meta))

    def option(self, meta: Any, c: list) -> ir.Option:
        key = self.string(c[0]) if c[0].type == "STRING" else str(c[0])
        return ir.Option(key=key, value=c[1], span=self.span(meta))

    def calibrate(self, meta: Any, c: list) -> _Clause:
        found = self.gather(c[1:])
        node = ir.Calibrate(what=c[0], tokens=found.get("tokens"), repeat=found.get("repeat"),
                            span=self.span(meta))
        return _Clause("calibrate", node, node.span)

    # -- sessions and statements

    def session(self, meta: Any, c: list) -> _Clause:
        f = self.gather(c[2:-1])
        node = ir.Session(name=str(c[0]), repeat=c[1], body=c[-1], arrive=f.get("arrive"),
                          concurrency=f.get("concurrency"), turns=f.get("turns"),
                          span=self.span(meta))
        return _Clause("session", node, node.span)

    def arrive_every(self, meta: Any, c: list) -> _Clause:
        span = self.span(meta)
        return _Clause("arrive", ir.Arrival(how="every", value=c[0], burst=c[1], span=span),
                       span)

    def arrive_at(self, meta: Any, c: list) -> _Clause:
        span = self.span(meta)
        return _Clause("arrive", ir.Arrival(how="at", value=c[0], span=span), span)

    def session_cap(self, meta: Any, c: list) -> _Clause:
        return _Clause("concurrency", c[0], self.span(meta))

    def turns(self, meta: Any, c: list) -> _Clause:
        return _Clause("turns", c[0], self.span(meta))

    def trace_session(self, meta: Any, c: list) -> _Clause:
        span = self.span(meta)
        options = () if c[2] is None else c[2].items
        node = ir.Session(name=str(c[0]), body=(), span=span,
                          trace=ir.TraceSource(path=c[1], options=options, span=span))
        return _Clause("session", node, node.span)

    def block(self, meta: Any, c: list) -> tuple:
        return tuple(c)

    def message(self, meta: Any, c: list) -> ir.Message:
        return ir.Message(role=c[0], parts=tuple(c[1:]), span=self.span(meta))

    def text_decl(self, meta: Any, c: list) -> _Clause:
        node = ir.Text(name=str(c[0]), parts=tuple(c[1:]), span=self.span(meta))
        return _Clause("text", node, node.span)

    def text_part(self, meta: Any, c: list) -> ir.TextPart | ir.ExprPart:
        """A literal string of a tool call's argument (an `ExprPart` when it formats values
        into itself)."""
        value = self.str_literal(meta, c)
        if isinstance(value, ir.Str):
            return ir.TextPart(value=value.value, span=value.span)
        return ir.ExprPart(value=value, span=self.span(meta))

    def expr_part(self, meta: Any, c: list) -> ir.TextPart | ir.ExprPart:
        """A string literal is a `TextPart`; any other expression an `ExprPart`."""
        if isinstance(c[0], ir.Str):
            return ir.TextPart(value=c[0].value, span=c[0].span)
        return ir.ExprPart(value=c[0], span=self.span(meta))

    def dataset_decl(self, meta: Any, c: list) -> _Clause:
        node = ir.Dataset(name=str(c[0]), path=c[1], span=self.span(meta))
        return _Clause("dataset", node, node.span)

    def prompt_part(self, meta: Any, c: list) -> ir.DataPart:
        return ir.DataPart(what="prompt", dataset=str(c[0]), index=c[1], span=self.span(meta))

    def answer_part(self, meta: Any, c: list) -> ir.DataPart:
        return ir.DataPart(what="answer", dataset=str(c[0]), index=c[1], span=self.span(meta))

    def data_filler(self, meta: Any, c: list) -> ir.DataPart:
        return ir.DataPart(what="filler", dataset=str(c[1]), tokens=c[0], span=self.span(meta))

    def reply_part(self, meta: Any, c: list) -> ir.ReplyPart:
        return ir.ReplyPart(name=str(c[0]), index=c[1], span=self.span(meta))

    def filler_part(self, meta: Any, c: list) -> ir.FillerPart:
        return ir.FillerPart(tokens=c[0], needle_at=c[1], span=self.span(meta))

    def tool_call(self, meta: Any, c: list) -> ir.CallPart:
        return ir.CallPart(name=str(c[0]), args=tuple(c[1] or ()), span=self.span(meta))

    def call_args(self, meta: Any, c: list) -> list:
        return c

    def call_arg(self, meta: Any, c: list) -> ir.CallArg:
        key = self.string(c[0]) if c[0].type == "STRING" else str(c[0])
        return ir.CallArg(key=key, value=c[1], span=self.span(meta))

    def reply(self, meta: Any, c: list) -> ir.Reply:
        calls = tuple(x for x in c[1:] if isinstance(x, ir.CallPart))
        f = self.gather([x for x in c[1:] if not isinstance(x, ir.CallPart)])
        return ir.Reply(max_tokens=c[0], mode=f.get("mode", "replay"), abort_after=f.get("abort"),
                        name=f.get("as"), label=f.get("label"), options=_flat(f.get("options", [])),
                        expect=tuple(f.get("expect", [])), isolated=f.get("isolated", False),
                        calls=calls, span=self.span(meta))

    def expect(self, meta: Any, c: list) -> _Clause:
        span = self.span(meta)
        node = (ir.Expect(what="text", text=self.string(c[0]), span=span) if c
                else ir.Expect(what="needle", span=span))
        return _Clause("expect", node, span)

    def expect_cached(self, meta: Any, c: list) -> _Clause:
        return _Clause("expect cached", True, self.span(meta))

    def probe(self, meta: Any, c: list) -> ir.Probe:
        f = self.gather(c[1:])
        return ir.Probe(max_tokens=c[0], name=f.get("as"), label=f.get("label"),
                        options=_flat(f.get("options", [])), isolated=f.get("isolated", False),
                        expect_cached=f.get("expect cached", False), span=self.span(meta))

    def resend(self, meta: Any, c: list) -> ir.Resend:
        f = self.gather(c[2:])
        return ir.Resend(name=str(c[0]), index=c[1], max_tokens=f.get("max_tokens"),
                         label=f.get("label"), isolated=f.get("isolated", False),
                         span=self.span(meta))

    def wait(self, meta: Any, c: list) -> ir.Wait:
        return ir.Wait(duration=c[0], reading=c[1], span=self.span(meta))

    def wait_reading(self, meta: Any, c: list) -> ir.Wait:
        return ir.Wait(reading=c[0], span=self.span(meta))

    def turn(self, meta: Any, c: list) -> ir.Turn:
        return ir.Turn(name=str(c[0]), isolated=c[1] is not None, body=c[2],
                       span=self.span(meta))

    def phase(self, meta: Any, c: list) -> ir.Phase:
        return ir.Phase(name=str(c[0]), body=c[1], span=self.span(meta))

    def for_loop(self, meta: Any, c: list) -> ir.For:
        var, reverse, first, second, *clauses, body = c
        f = self.gather(clauses)
        bounds = {"over": first} if second is None else {"low": first, "high": second}
        return ir.For(var=str(var), reverse=reverse is not None, until=f.get("until"),
                      label=f.get("label"), isolated=f.get("isolated", False), body=body,
                      span=self.span(meta), **bounds)

    def repeat(self, meta: Any, c: list) -> ir.Repeat:
        f = self.gather(c[1:-1])
        return ir.Repeat(count=c[0], var=f.get("as"), label=f.get("label"),
                         isolated=f.get("isolated", False), body=c[-1], span=self.span(meta))

    def grow(self, meta: Any, c: list) -> ir.Grow:
        f = self.gather(c[2:-1])
        return ir.Grow(until=c[0], by=c[1], var=f.get("as"), label=f.get("label"),
                       isolated=f.get("isolated", False), body=c[-1], span=self.span(meta))

    def spawn(self, meta: Any, c: list) -> ir.Spawn:
        f = self.gather(c[1:-1])
        return ir.Spawn(count=c[0], mode=f.get("mode", "cold"), var=f.get("as"),
                        label=f.get("label"), isolated=f.get("isolated", False),
                        parallel=f.get("parallel", False), keep=f.get("keep"), body=c[-1],
                        span=self.span(meta))

    def parallel(self, meta: Any, c: list) -> _Clause:
        return _Clause("parallel", True, self.span(meta))

    def keep_first(self, meta: Any, c: list) -> _Clause:
        return _Clause("keep", ir.Keep(rule="first", span=self.span(meta)), self.span(meta))

    def keep_longest(self, meta: Any, c: list) -> _Clause:
        return _Clause("keep", ir.Keep(rule="longest", span=self.span(meta)), self.span(meta))

    def keep_index(self, meta: Any, c: list) -> _Clause:
        node = ir.Keep(rule="index", index=c[0], span=self.span(meta))
        return _Clause("keep", node, node.span)

    def fresh(self, meta: Any, c: list) -> ir.Fresh:
        f = self.gather(c[:-1])
        return ir.Fresh(label=f.get("label"), isolated=f.get("isolated", False), body=c[-1],
                        span=self.span(meta))

    def if_stmt(self, meta: Any, c: list) -> ir.If:
        return ir.If(cond=c[0], then=c[1], orelse=c[2] or (), span=self.span(meta))

    def else_part(self, meta: Any, c: list) -> tuple:
        return c[0] if isinstance(c[0], tuple) else (c[0],)

    # -- expressions

    def num(self, meta: Any, c: list) -> ir.Num:
        parsed = split_number(c[0].value)
        assert parsed is not None  # the lexer's NUMBER is a number
        value, unit = parsed
        if bounds.number_too_large(value):
            self.diags.append(error("WL111", f"the number `{c[0].value}` is too large",
                                    self.span(meta), f"a number is at most "
                                    f"{bounds.MAX_NUMBER:,.0f} in magnitude"))
            value = 0.0
        return ir.Num(value=value, unit=unit, text=c[0].value, span=self.span(meta))

    def str_literal(self, meta: Any, c: list) -> ir.Str | ir.BinOp:
        """A string literal; one with `{$name}` in it is the join of its pieces and each
        value as text (`"agent " + str($i)`), each `$name` spanning its own columns."""
        tok = c[0]
        if not _FORMAT.search(tok.value):
            return ir.Str(value=self.string(tok), span=self.span(meta))
        pieces: list[ir.Expr] = []
        at = 1  # past the opening quote
        for m in _FORMAT.finditer(tok.value):
            if m.start() > at:
                pieces.append(self.piece(tok, at, m.start()))
            ref = ir.Ref(name=m.group(1), span=self.sub_span(tok, m.start() + 1, m.end() - 1))
            pieces.append(ir.Call(func="str", args=(ref,), span=self.sub_span(
                tok, m.start(), m.end())))
            at = m.end()
        if at < len(tok.value) - 1:
            pieces.append(self.piece(tok, at, len(tok.value) - 1))
        out = pieces[0] if isinstance(pieces[0], ir.Str) else \
            ir.BinOp(op="+", left=ir.Str(value="", span=self.sub_span(tok, 0, 1)),
                     right=pieces[0], span=pieces[0].span)
        for p in pieces[1:]:
            out = ir.BinOp(op="+", left=out, right=p, span=self.span(meta))
        return out

    def piece(self, tok: Token, start: int, end: int) -> ir.Str:
        """The literal text of `tok.value[start:end]`, unescaped."""
        line, column = _position(tok)
        raw = Token("STRING", '"' + tok.value[start:end] + '"', line=line,
                    column=column + start - 1, end_line=line, end_column=column + end + 1)
        return ir.Str(value=self.string(raw), span=self.sub_span(tok, start, end))

    def sub_span(self, tok: Token, start: int, end: int) -> ir.Span:
        """The span of `tok.value[start:end]` (a string is on one line)."""
        line, column = _position(tok)
        return ir.Span(file=self.filename, line=line, col=column + start, end_line=line,
                       end_col=column + end)

    def bool(self, meta: Any, c: list) -> ir.Bool:
        return ir.Bool(value=c[0].value == "true", span=self.span(meta))

    def null(self, meta: Any, c: list) -> ir.Null:
        return ir.Null(span=self.span(meta))

    def ref(self, meta: Any, c: list) -> ir.Ref:
        return ir.Ref(name=c[0].value[1:], span=self.span(meta))

    def binop(self, meta: Any, c: list) -> ir.BinOp:
        return ir.BinOp(op=c[1].value, left=c[0], right=c[2], span=self.span(meta))

    def neg(self, meta: Any, c: list) -> ir.Neg:
        return ir.Neg(operand=c[1], span=self.span(meta))

    def not_op(self, meta: Any, c: list) -> ir.Not:
        return ir.Not(operand=c[1], span=self.span(meta))

    def call(self, meta: Any, c: list) -> ir.Call:
        return ir.Call(func=c[0].value, args=tuple(c[1] or ()), span=self.span(meta))

    def list_literal(self, meta: Any, c: list) -> ir.ListExpr:
        return ir.ListExpr(items=tuple(c[0] or ()), span=self.span(meta))

    def args(self, meta: Any, c: list) -> list:
        return c

    gargs = args

    # -- gates and report

    def gate(self, meta: Any, c: list) -> ir.Gate:
        name, scope, left, compare, when, verdict, severity = c
        op, right = compare or (None, None)
        return ir.Gate(name=str(name),
                       scope="each_session" if scope == "each session" else "overall",
                       left=_gexpr(left), op=op, right=right and _gexpr(right), when=when,
                       verdict=verdict, severity=severity or "fail", span=self.span(meta))

    def applies(self, meta: Any, c: list) -> ir.Condition:
        left, compare = c
        op, right = compare or (None, None)
        span = self.span(meta)
        return ir.Condition(left=_gexpr(left), op=op, right=right and _gexpr(right),
                            text=self.written(meta, skip="when"), span=span)

    def written(self, meta: Any, skip: str = "") -> str:
        """The source text of a node, comments left out and blanks collapsed, without its
        leading keyword `skip`."""
        text = " ".join(_COMMENT.sub("", self.text[meta.start_pos:meta.end_pos]).split())
        return text[len(skip):].lstrip() if skip and text.startswith(skip) else text

    def compare(self, meta: Any, c: list) -> tuple:
        return (c[0].value, c[1])

    def verdict(self, meta: Any, c: list) -> str:
        return str(c[0])

    def scope(self, meta: Any, c: list) -> str:
        return " ".join(str(t) for t in c)

    def report_item(self, meta: Any, c: list) -> ir.ReportItem:
        return ir.ReportItem(name=str(c[0]), value=_gexpr(c[1]), fmt=c[2] or "number", by=c[3],
                             span=self.span(meta))

    def fmt(self, meta: Any, c: list) -> str:
        return c[0]

    def group_by(self, meta: Any, c: list) -> str:
        return c[0]

    def gbin(self, meta: Any, c: list) -> Any:
        left, op, right = c
        if _is_expr(left) and _is_expr(right):  # no metric inside: a plan-time expression
            return ir.BinOp(op=op.value, left=left, right=right, span=self.span(meta))
        return ir.GBin(op=op.value, left=_gexpr(left), right=_gexpr(right), span=self.span(meta))

    def gneg(self, meta: Any, c: list) -> Any:
        span = self.span(meta)
        if _is_expr(c[1]):
            return ir.Neg(operand=c[1], span=span)
        zero = ir.GNum(value=ir.Num(value=0, text="0", span=span), span=span)
        return ir.GBin(op="-", left=zero, right=c[1], span=span)

    def gcall(self, meta: Any, c: list) -> Any:
        func, args, span = c[0].value, c[1] or [], self.span(meta)
        if all(_is_expr(a) for a in args):
            return ir.Call(func=func, args=tuple(args), span=span)
        if func in ("max", "min") and len(args) >= 2:
            return ir.GCall(func=func, args=tuple(_gexpr(a) for a in args), span=span)
        if len(args) != 1 or not isinstance(args[0], ir.MetricRef):
            self.diags.append(error(
                "WL308", f"`{func}` takes one metric, like `{func}(ttft{{main}})`", span,
                "aggregate first, then do arithmetic: `median(ttft{a}) * 2`, not "
                "`median(ttft{a} * 2)`"))
            return ir.GNum(value=ir.Num(value=0, text="0", span=span), span=span)
        return ir.Agg(func=func, arg=args[0], span=span)

    def metric(self, meta: Any, c: list) -> ir.MetricRef:
        return ir.MetricRef(metric=str(c[0]), selector=c[1] or (), span=self.span(meta))

    def selector(self, meta: Any, c: list) -> tuple:
        return tuple(i for i in c if i is not None)

    def sel_name(self, meta: Any, c: list) -> ir.SelItem:
        return ir.SelItem(key="flag" if str(c[0]) in FLAGS else "name", value=str(c[0]),
                          span=self.span(meta))

    def sel_keyed(self, meta: Any, c: list) -> ir.SelItem:
        return ir.SelItem(key=c[0], value=str(c[1]), span=self.span(meta))

    def sel_last(self, meta: Any, c: list) -> ir.SelItem:
        return ir.SelItem(key="last", count=c[0], span=self.span(meta))

    def sel_first(self, meta: Any, c: list) -> ir.SelItem:
        return ir.SelItem(key="first", count=c[0], span=self.span(meta))

    # the grammar's rules `str` and `list`, bound last: in the class body above, `str` and `list`
    # are the builtins
    str = str_literal
    list = list_literal


def _position(tok: Token) -> tuple[int, int]:
    """The line and column of a token the lexer made (Lark's type allows None)."""
    assert tok.line is not None and tok.column is not None
    return tok.line, tok.column


_GNODES = (ir.MetricRef, ir.Agg, ir.GNum, ir.GBin, ir.GCall)


def _is_expr(node: Any) -> bool:
    return not isinstance(node, _GNODES)


def _gexpr(node: Any) -> Any:
    """A gate operand as a `GExpr`: a metric-free expression becomes `GNum`."""
    return ir.GNum(value=node, span=node.span) if _is_expr(node) else node


def _flat(groups: list[tuple]) -> tuple:
    return tuple(x for group in groups for x in group)
