"""What the `wl` commands share: loading, checking and planning a workload from the command
line, showing its diagnostics, and one-line errors.

Input: a `PlanRequest` (the workload, its param flags, the sweep, the salt, the limits).
Output: `Prepared` (checked before any engine is reached), `api.PlannedRuns`; diagnostics on
stderr (or JSON on stdout); `UsageError` for what the command line got wrong (exit 2).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloadlang import api, ir
from workloadlang.cli.arguments import command_flags
from workloadlang.cli.requests import PlanRequest, SearchRequest, UsageError
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_json, render_text
from workloadlang.results import ExitCode

if TYPE_CHECKING:
    from workloadlang.ratesearch import SearchSpec

__all__ = ["Prepared", "UsageError", "eprint", "load", "param_overrides", "plan_runs",
           "prepare", "show_diags", "workload_help"]


def eprint(*a: Any) -> None:
    print(*a, file=sys.stderr)


def param_overrides(wl, extra: Sequence[str], pairs: Sequence[str]) -> dict[str, str]:
    """`-p name=value` and `--param-name value` / `--param-name=value` -> {name: text}."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise UsageError(f"-p expects name=value, got `{p}`")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    known = {p.name.replace("_", "-"): p.name for p in wl.params}
    it = iter(extra)
    for arg in it:
        if not arg.startswith("--"):
            raise UsageError(f"unexpected argument `{arg}`")
        flag, _, val = arg[2:].partition("=")
        name = known.get(flag)
        if name is None:
            guess = difflib.get_close_matches(flag, list(known), n=1)
            hint = f" (did you mean --{guess[0]}?)" if guess else ""
            params = ", ".join(f"--{k}" for k in known) or "none"
            raise UsageError(f"unknown parameter --{flag}{hint}; this workload's: {params}")
        if not val:
            following = next(it, None)
            if following is None:
                raise UsageError(f"--{flag} needs a value")
            val = following
        out[name] = val
    return out


MAX_SHOWN = 50
"""Diagnostics printed as text at most (JSON lists them all)."""


def show_diags(diags: list[Diagnostic], source: api.Source, fmt: str) -> None:
    if fmt == "json":
        print(render_json(diags))
        return
    eprint(render_text(diags[:MAX_SHOWN], {source.name: source.text}).rstrip())
    if len(diags) > MAX_SHOWN:
        eprint(f"\n({len(diags) - MAX_SHOWN:,} more diagnostics not shown; --format json lists "
               "them all)")


def load(target: str, fmt: str) -> api.Source:
    """`api.load`, its diagnostics (a file that is no `.wl` text) shown: exit 2."""
    try:
        return api.load(target)
    except WorkloadError as e:
        show_diags(e.diagnostics, api.Source(name=target, text=e.text or ""), fmt)
        raise SystemExit(ExitCode.USAGE) from None


@dataclass(frozen=True)
class Prepared:
    """A workload read, checked and given its params, ready to plan: its source, the checked
    workload, what to plan it with (the salt drawn), a rate search asked for, how diagnostics
    are shown."""

    source: api.Source
    wl: ir.Workload
    options: api.PlanOptions
    search: SearchSpec | None = None
    format: str = "text"


@contextmanager
def reported(source: api.Source, fmt: str) -> Iterator[None]:
    """A workload's diagnostics shown (exit 2); a sweep or search that cannot be run:
    `UsageError`."""
    from workloadlang.ratesearch import SearchError

    try:
        yield
    except (api.SweepError, SearchError) as e:
        raise UsageError(str(e)) from None
    except WorkloadError as e:
        show_diags(e.diagnostics, source, fmt)
        raise SystemExit(ExitCode.USAGE) from None


def prepare(request: PlanRequest, search: SearchRequest | None = None) -> Prepared:
    """Everything of `wl plan` and `wl run` that needs no engine, before any is reached: the
    workload loaded, parsed and checked, its param flags read, the salt drawn, the sweep or
    the rate `search` asked for checked, the params' values checked (`api.check_runs`; a
    search's at its low end). Output: `Prepared`. Exits 2 with the diagnostics; raises
    `UsageError`."""
    source = load(request.workload, request.format)
    env = {"max_context": request.max_context}
    with reported(source, request.format):
        wl = api.parse_checked(source, command_flags())
        options = api.PlanOptions(
            overrides=param_overrides(wl, request.flags, request.pairs), sweep=request.sweep,
            salt=request.salt or api.fresh_salt(), limits=request.limits, cache=request.cache)
        spec = None
        if search is None:
            api.check_runs(wl, options, env)
        else:
            from workloadlang.ratesearch import spec_of

            spec = spec_of(wl, options.overrides, search.range, search.precision, search.runs)
            api.check_params(wl, {**options.overrides, spec.param: spec.text(spec.low)}, env)
    return Prepared(source, wl, options, spec, request.format)


def plan_runs(prepared: Prepared, env: dict[str, Any], *,
              keep_all: bool = True) -> api.PlannedRuns:
    """The plans of a prepared workload (`api.plan_runs`: one, or a sweep's points);
    `keep_all` False: of a sweep's points after the first, what a row of `wl plan` lists.
    Exits 2 with the diagnostics of a plan that cannot be made."""
    with reported(prepared.source, prepared.format):
        return api.plan_runs(prepared.wl, prepared.source, prepared.options, env,
                             keep_all=keep_all)


def span_text(text: str, span: Any) -> str:
    """The source text under `span` (one line: a longer one is cut at its first line's end)."""
    lines = text.splitlines()
    if not 1 <= span.line <= len(lines):
        return ""
    line = lines[span.line - 1]
    end = span.end_col - 1 if span.end_line == span.line else len(line)
    return line[span.col - 1:end].strip()


def params_help(wl, source: api.Source) -> str:
    """Input: a parsed workload and its source. Output: the help text of its params, one line
    each: the flag, the type, the default as written (or `required`), the range, the choices,
    the doc; for `wl plan FILE --help` and `wl run FILE --help`."""
    if not wl.params:
        return f"{source.name} has no params."
    rows = []
    for p in wl.params:
        what = [p.type + (" list" if p.is_list else "")]
        what.append("required" if p.default is None else
                    f"default {span_text(source.text, p.default.span)}")
        if p.range is not None:
            what.append("in " + span_text(source.text, p.range.span))
        if p.choices:
            what.append("one of " + ", ".join(p.choices))
        if p.sweep is not None:
            what.append(f"sweep {span_text(source.text, p.sweep.span)}")
        flag = f"--{p.name.replace('_', '-')} VALUE"
        rows.append(f"  {flag:<28} {', '.join(what)}" + (f": {p.doc}" if p.doc else ""))
    return (f"params of {source.name} (each a flag, or -p NAME=VALUE; values take units: 8k, "
            "500ms, 95%):\n" + "\n".join(rows))


def workload_help(argv: Sequence[str]) -> str | None:
    """For `wl plan|run ... --help` naming a workload: its params' help (`params_help`), or a
    line saying why the workload cannot be read; None for any other command line."""
    if len(argv) < 2 or argv[0] not in ("plan", "run") or not ({"-h", "--help"} & set(argv)):
        return None
    for word in argv[1:]:
        if word.startswith("-"):
            continue
        try:
            source = api.load(word)
        except (api.NotFound, WorkloadError):
            continue
        try:
            from workloadlang.parse import parse

            return params_help(parse(source.text, source.name), source)
        except WorkloadError:
            return f"{source.name} does not parse: `wl check {word}` says why."
    return None
