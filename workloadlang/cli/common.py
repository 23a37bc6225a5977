"""What the `wl` commands share: loading and planning a workload from the command line, showing
its diagnostics, and one-line errors.

Input: parsed arguments and the param flags. Output: `api.Source`, `Plan`; diagnostics on stderr
(or JSON on stdout); `UsageError` for what the command line got wrong (exit 2).
"""

from __future__ import annotations

import difflib
import sys
from typing import Any, Sequence

from workloadlang import api
from workloadlang.cli.arguments import DEFAULT_CACHE_BLOCK, command_flags
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_json, render_text
from workloadlang.results import ExitCode


class UsageError(Exception):
    pass


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
            val = next(it, None)
            if val is None:
                raise UsageError(f"--{flag} needs a value")
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
        raise SystemExit(ExitCode.USAGE)


def load_and_plan(args, extra: Sequence[str], env: dict[str, Any]):
    source, wl, _, plans = load_and_plan_sweep(args, extra, env)
    return source, wl, plans[0]


def load_and_plan_sweep(args, extra: Sequence[str], env: dict[str, Any], *,
                        keep_all: bool = True):
    """The workload and its plans: one, or one per value of the param swept (`--sweep`, or
    the file's `sweep [...]`), the points planned into one budget (together within the
    limits). `keep_all` False: of a sweep's points after the first, only what a row lists
    (`sweeppoints.row_only`). Output: (source, workload, (param, values) or None, plans)."""
    from workloadlang.plan import sweeppoints

    source = load(args.workload, getattr(args, "format", "text"))
    try:
        wl = api.parse_checked(source, command_flags())
        overrides = param_overrides(wl, extra, args.param or [])
        swept = sweeppoints.points(wl, overrides, getattr(args, "sweep", None))
        salt = args.salt or api.fresh_salt()
        limits, cache = plan_limits(args), cache_model(args)
        plans = [api.make_plan(wl, source, overrides, salt=salt, env=env, limits=limits,
                               cache=cache)] if swept is None else \
            plan_points(wl, source, overrides, swept, salt, env, limits, cache, keep_all)
    except sweeppoints.SweepError as e:
        raise UsageError(str(e)) from None
    except WorkloadError as e:
        show_diags(e.diagnostics, source, getattr(args, "format", "text"))
        raise SystemExit(ExitCode.USAGE)
    return source, wl, swept, plans


def plan_points(wl, source: api.Source, overrides: dict[str, str],
                swept: tuple[str, list[str]], salt: str, env: dict[str, Any], limits: Any,
                cache: Any, keep_all: bool) -> list:
    """A sweep's plans, one per point with its own salt (`sweeppoints.salts`), planned into one
    budget; `keep_all` False: after the first, what a row lists (`sweeppoints.row_only`)."""
    from workloadlang.plan import sweeppoints
    from workloadlang.plan.limits import Budget

    name, budget, plans = swept[0], Budget(limits), []
    for i, (v, s) in enumerate(zip(swept[1], sweeppoints.salts(salt, name, swept[1]))):
        budget.next_point(f"{name}={v}")
        plan = api.make_plan(wl, source, {**overrides, name: v}, salt=s, env=env,
                             limits=limits, cache=cache, budget=budget)
        plans.append(plan if keep_all or not i else sweeppoints.row_only(plan))
    return plans


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


def config_error(exc: ValueError, prefix: str = "") -> str:
    """A simulator configuration error in one line, naming the flag (pydantic's errors name the
    field: `device_tokens` is `--device-tokens`)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    flag = f"--{prefix}{field.replace('_', '-')}" if field and field != "faults" else \
        f"--{prefix}fault"
    return f"{flag}: {first['msg'].lower()}, got {first.get('input')!r}"


def plan_limits(args) -> Any:
    from workloadlang.plan.limits import Limits

    return Limits(requests=args.max_requests, request_tokens=args.max_request_tokens,
                  total_tokens=args.max_total_tokens)


def cache_model(args) -> Any:
    """The LRU cache of `--cache-tokens` / `--cache-block`, or None."""
    from workloadlang.plan.model import CacheModel

    if args.cache_tokens is None:
        if args.cache_block is not None:
            raise UsageError("--cache-block needs --cache-tokens")
        return None
    return CacheModel(tokens=args.cache_tokens, block=args.cache_block or DEFAULT_CACHE_BLOCK)

