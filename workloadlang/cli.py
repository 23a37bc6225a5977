"""The `wl` command: a thin shell over `workloadlang.api`.

Input: argv. Output: text on stdout/stderr and an exit code (docs/cli.md):
0 passed, 1 a gate failed, 2 usage or workload error, 3 endpoint unreachable or lacking a
capability, 4 run incomplete, 5 a file written to a fallback path instead of the one asked for,
130 interrupted (after writing what was measured).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import unicodedata
from typing import Any, Sequence

from workloadlang import api
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_json, render_text

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_ENDPOINT, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class UsageError(Exception):
    pass


def eprint(*a: Any) -> None:
    print(*a, file=sys.stderr)


# ---------------------------------------------------------------- params from the command line


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
        raise SystemExit(EXIT_USAGE)


def load_and_plan(args, extra: Sequence[str], env: dict[str, Any]):
    source, wl, _, plans = load_and_plan_sweep(args, extra, env)
    return source, wl, plans[0]


def load_and_plan_sweep(args, extra: Sequence[str], env: dict[str, Any]):
    """The workload and its plans: one, or one per value of the param swept (`--sweep`, or
    the file's `sweep [...]`). Output: (source, workload, (param, values) or None, plans)."""
    from workloadlang import sweep

    source = load(args.workload, getattr(args, "format", "text"))
    try:
        wl = api.parse_checked(source)
        overrides = param_overrides(wl, extra, args.param or [])
        swept = sweep.points(wl, overrides, getattr(args, "sweep", None))
        values = [None] if swept is None else swept[1]
        salt = args.salt or api.fresh_salt()
        plans = [api.make_plan(
            wl, source, overrides if v is None else {**overrides, swept[0]: v},
            salt=salt if v is None else sweep.point_salt(salt, swept[0], v), env=env,
            limits=plan_limits(args), cache=cache_model(args)) for v in values]
    except sweep.SweepError as e:
        raise UsageError(str(e)) from None
    except WorkloadError as e:
        show_diags(e.diagnostics, source, getattr(args, "format", "text"))
        raise SystemExit(EXIT_USAGE)
    return source, wl, swept, plans


# ---------------------------------------------------------------- commands


def cmd_check(args, extra) -> int:
    if extra:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    status = EXIT_OK
    all_diags = []
    for target in args.workloads:
        source, diags = check_one(target)
        if any(d.severity == "error" for d in diags):
            status = EXIT_USAGE
        all_diags += diags
        if args.format == "text" and diags:
            show_diags(diags, source, "text")
        elif args.format == "text":
            eprint(f"{source.name}: ok")
    if args.format == "json":
        print(render_json(all_diags))
    return status


def check_one(target: str) -> tuple[api.Source, list[Diagnostic]]:
    """One `wl check` target: its source (empty when it is no `.wl` text) and diagnostics."""
    source = api.Source(name=target, text="")
    try:
        source = api.load(target)
        return source, api.warnings(api.parse_checked(source))
    except WorkloadError as e:
        return (source if e.text is None else api.Source(name=target, text=e.text)), e.diagnostics


def cmd_plan(args, extra) -> int:
    from workloadlang.plan.render import render_plan

    env = {"max_context": args.max_context}
    _, _, swept, plans = load_and_plan_sweep(args, extra, env)
    if swept is not None:
        return print_sweep_plans(swept, plans, args)
    plan = plans[0]
    if args.json:  # bytes straight out where it can: a 50,000-request plan's JSON is 100 MB
        from workloadlang.plan.assemble import PLAN_JSON

        data = PLAN_JSON.dump_json(plan, indent=2)
        out = getattr(sys.stdout, "buffer", None)
        if out is None:
            print(data.decode())
        else:
            sys.stdout.flush()
            out.write(data + b"\n")
            out.flush()
    else:
        print(render_plan(plan, full=args.full), end="")
    return EXIT_OK


def print_sweep_plans(swept: tuple[str, list[str]], plans: list, args) -> int:
    """`wl plan` of a sweep: a row per point, then the first point's dry-run (or, with
    `--json`, every plan in a JSON object)."""
    from tabulate import tabulate

    from workloadlang import sweep
    from workloadlang.plan.render import render_plan

    name, values = swept
    if args.json:
        from workloadlang.plan.assemble import PLAN_JSON

        print(json.dumps({"param": name, "values": values,
                          "plans": [json.loads(PLAN_JSON.dump_json(p)) for p in plans]},
                         indent=2))
        return EXIT_OK
    rows = [[v, f"{p.totals.requests:,}", f"{p.totals.prompt_tokens:,}",
             f"{p.totals.expected_cached_tokens:,}", f"{p.totals.working_set_tokens:,}",
             p.concurrency, p.plan_hash] for v, p in zip(values, plans)]
    print(f"sweep {name}: {len(values)} runs, one per value, into one results file\n")
    print(tabulate(rows, headers=[name, "requests", "prompt tokens", "exp. cached",
                                  "working set", "concurrency", "plan"],
                   tablefmt="simple", disable_numparse=True))
    flag = f"--{name.replace('_', '-')}"
    base = sweep.sweep_salt(plans[0].salt, name, values[0])
    print(f"\nthe first run ({name}={values[0]}, salt {plans[0].salt}); `wl plan ... --salt "
          f"{base}/{name}=VALUE {flag} VALUE` shows another:\n")
    print(render_plan(plans[0], full=args.full), end="")
    return EXIT_OK


def cmd_list(args, extra) -> int:
    from tabulate import tabulate

    from workloadlang.resources import bundled_workloads

    rows = []
    for name, path in bundled_workloads():
        source = api.Source(name=f"{name}.wl", text=path.read_text(encoding="utf-8"))
        wl = api.parse_checked(source)
        params = ", ".join(
            p.name + ("" if p.default is not None else " (required)") for p in wl.params)
        rows.append([name, wl.doc, params])
    print(tabulate(rows, headers=["workload", "what it measures", "params"], tablefmt="simple",
                   maxcolwidths=[None, 50, 60]))
    return EXIT_OK


def cmd_run(args, extra) -> int:
    from workloadlang.run.cli_run import run_command

    return run_command(args, extra)


def cmd_compare(args, extra) -> int:
    from workloadlang.compare import compare_command

    return compare_command(args)


def cmd_report(args, extra) -> int:
    from workloadlang.report import report_command

    if extra:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    return report_command(args)


def cmd_sim(args, extra) -> int:
    from workloadlang.sim import config_from_args, serve

    if extra:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        raise UsageError(config_error(exc)) from None
    eprint(f"simulator on http://{args.host}:{args.port}/v1 (preset {args.sim_preset or 'default'}); Ctrl-C stops")
    try:
        serve(cfg, host=args.host, port=args.port)
    except OSError as exc:
        eprint(f"error: cannot listen on {args.host}:{args.port}: {exc}")
        return EXIT_USAGE
    return EXIT_OK


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


# ---------------------------------------------------------------- parser


def salt_text(text: str) -> str:
    """An argparse type: a salt is 1 to 200 characters, none a control character or a byte that
    was not text (an empty salt would silently draw a fresh one, and the run could not be
    replayed)."""
    if not 1 <= len(text) <= 200 or any(unicodedata.category(c) in ("Cc", "Cs") for c in text):
        raise argparse.ArgumentTypeError(
            f"a salt is 1 to 200 characters, no control characters, got {text[:40]!r}")
    return text


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {text!r}")
    return port


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def token_count(text: str) -> int:
    """An argparse type: a whole number of tokens, units allowed (`3M`, `512`, `64Ki`)."""
    from workloadlang.evaluate import split_number

    parsed = split_number(text.strip())
    if parsed is None or parsed[1] != "number" or parsed[0] < 1 or parsed[0] != int(parsed[0]):
        raise argparse.ArgumentTypeError(f"expected a whole number of tokens (e.g. 3M), got "
                                         f"`{text}`")
    return int(parsed[0])


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


DEFAULT_CACHE_BLOCK = 16


def add_plan_args(p: argparse.ArgumentParser) -> None:
    from workloadlang.plan import limits

    p.add_argument("workload", help="a .wl file or a bundled workload name (wl list)")
    p.add_argument("--salt", type=salt_text,
                   help="replay a run exactly (default: fresh per run, printed)")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE",
                   help="set a param (every param is also a flag: kv_size -> --kv-size)")
    p.add_argument("--max-context", type=positive_int,
                   help="the engine's context limit, in tokens")
    p.add_argument("--sweep", metavar="NAME=V1,V2,...",
                   help="run once per value of a param, into one results file (a `sweep [...]` "
                   "in the file does the same unless the param is set)")
    p.add_argument("--cache-tokens", type=token_count, metavar="C",
                   help="also give what an LRU prefix cache of C tokens would serve each request")
    p.add_argument("--cache-block", type=token_count, metavar="B",
                   help=f"its block size in tokens (default {DEFAULT_CACHE_BLOCK})")
    p.add_argument("--max-requests", type=token_count, default=limits.DEFAULT_REQUESTS,
                   metavar="N", help="refuse a plan of more requests (default %(default)s)")
    p.add_argument("--max-request-tokens", type=token_count,
                   default=limits.DEFAULT_REQUEST_TOKENS, metavar="N",
                   help="refuse a request of more tokens (default %(default)s)")
    p.add_argument("--max-total-tokens", type=token_count, default=limits.DEFAULT_TOTAL_TOKENS,
                   metavar="N", help="refuse a plan whose prompts add up to more tokens "
                   "(default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="wl", description="workloadlang: measure what an "
                                 "inference engine's prefix cache really keeps")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check .wl files (exit 0 valid, 2 not)")
    c.add_argument("workloads", nargs="+")
    c.add_argument("--format", choices=["text", "json"], default="text")
    # No abbreviations on plan/run: a param flag such as `--max` must not be read as `--max-context`.
    p = sub.add_parser("plan", help="dry-run: print the token schedule, send nothing",
                       allow_abbrev=False)
    add_plan_args(p)
    p.add_argument("--json", action="store_true", help="the full plan as JSON")
    p.add_argument("--full", action="store_true", help="list every request")
    p.add_argument("--format", choices=["text", "json"], default="text", help=argparse.SUPPRESS)
    sub.add_parser("list", help="the bundled workloads")
    r = sub.add_parser("run", help="run a workload against an endpoint (or --sim)",
                       allow_abbrev=False)
    add_plan_args(r)
    from workloadlang.run.args import add_run_args

    add_run_args(r)
    cmp_ = sub.add_parser("compare", help="compare two results files of the same workload")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    rep = sub.add_parser("report", help="results JSON files -> one self-contained HTML report")
    rep.add_argument("results", nargs="+",
                     help="results files (wl run --output) of one workload; several overlay")
    rep.add_argument("-o", "--output", default="report.html",
                     help="the HTML file (default: %(default)s)")
    s = sub.add_parser("sim", help="the embedded simulator")
    ssub = s.add_subparsers(dest="sim_command", required=True)
    serve = ssub.add_parser("serve", help="serve the simulator on loopback")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8000)
    from workloadlang.sim import add_sim_arguments

    add_sim_arguments(serve)
    return ap


COMMANDS = {"check": cmd_check, "plan": cmd_plan, "list": cmd_list, "run": cmd_run,
            "compare": cmd_compare, "report": cmd_report, "sim": cmd_sim}


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args, extra = ap.parse_known_args(argv)
    try:
        return COMMANDS[args.command](args, extra)
    except UsageError as e:
        eprint(f"wl {args.command}: error: {e}")
        return EXIT_USAGE
    except api.NotFound as e:
        eprint(f"wl {args.command}: error: {e}")
        return EXIT_USAGE
    except SystemExit as e:
        return int(e.code or 0)
    except KeyboardInterrupt:
        eprint("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
