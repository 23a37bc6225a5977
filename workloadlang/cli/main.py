"""The `wl` command: a thin shell over `workloadlang.api`.

Input: argv. Output: text on stdout/stderr and an exit code (`results.ExitCode`, docs/cli.md):
0 passed, 1 a gate failed, 2 usage or workload error, 3 endpoint unreachable or lacking a
capability, 4 run incomplete, 5 a file written to a fallback path instead of the one asked for,
130 interrupted (after writing what was measured).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from typing import Any

from workloadlang import api
from workloadlang.cli import requests
from workloadlang.cli.arguments import (
    add_plan_args,
    add_plan_view_args,
    add_run_args,
    command_flags,
    port_number,
)
from workloadlang.cli.common import (
    UsageError,
    eprint,
    plan_runs,
    prepare,
    show_diags,
    workload_help,
)
from workloadlang.diagnostics import Diagnostic, WorkloadError, render_json
from workloadlang.results import ExitCode

# ---------------------------------------------------------------- commands


def cmd_check(args: argparse.Namespace, extra: list[str]) -> int:
    no_extra(extra)
    return check_command(requests.check_request(args))


def no_extra(extra: list[str]) -> None:
    """A command that takes no param flags: the words argparse left are an error."""
    if extra:
        raise UsageError(f"unexpected arguments: {' '.join(extra)}")


def check_command(request: requests.CheckRequest) -> int:
    """`wl check`: each file's diagnostics (or `FILE: ok`). Output: 2 when one has an error."""
    status = ExitCode.OK
    all_diags = []
    for target in request.workloads:
        source, diags = check_one(target)
        status = max(status, status_of(diags))
        all_diags += diags
        if request.format == "text" and diags:
            show_diags(diags, source, "text")
        if request.format == "text" and status_of(diags) == ExitCode.OK:
            warned = len(diags)
            print(f"{source.name}: ok" + (f" ({warned} warning{'s' if warned > 1 else ''})"
                                          if warned else ""))
    if request.format == "json":
        print(render_json(all_diags))
    return status


def status_of(diags: list[Diagnostic]) -> ExitCode:
    """`wl check`'s exit code for one file's diagnostics: 2 with an error, else 0."""
    return ExitCode.USAGE if any(d.severity == "error" for d in diags) else ExitCode.OK


def check_one(target: str) -> tuple[api.Source, list[Diagnostic]]:
    """One `wl check` target: its source (empty when it is no `.wl` text) and diagnostics."""
    source = api.Source(name=target, text="")
    try:
        source = api.load(target)
        flags = command_flags()
        return source, api.warnings(api.parse_checked(source, flags), flags)
    except WorkloadError as e:
        return (source if e.text is None else api.Source(name=target, text=e.text)), e.diagnostics


def cmd_plan(args: argparse.Namespace, extra: list[str]) -> int:
    return plan_command(requests.plan_request(args, extra))


def plan_command(request: requests.PlanRequest) -> int:
    """`wl plan`: the dry-run (or the plan's JSON) of one run or of a sweep's points."""
    from workloadlang.plan.dryrun import render_plan

    env = {"max_context": request.max_context}
    runs = plan_runs(prepare(request), env, keep_all=request.json)
    # the plans live until the command ends: out of the collector's scans, which would walk
    # every object of a 50,000-request plan again and again while the dry-run is made
    gc.freeze()
    if runs.swept is not None:
        return print_sweep_plans(runs.swept, runs.plans, request)
    plan = runs.plans[0]
    if request.json:  # bytes straight out where it can: a 50,000-request plan's JSON is 100 MB
        from workloadlang.plan.assemble import PLAN_JSON

        write_bytes(PLAN_JSON.dump_json(plan, indent=2) + b"\n")
    else:
        print(render_plan(plan, full=request.full), end="")
    return ExitCode.OK


def write_bytes(data: bytes) -> None:
    """`data` to stdout, as bytes where it can (a 50,000-request plan's JSON is 100 MB)."""
    out = getattr(sys.stdout, "buffer", None)
    if out is None:
        print(data.decode(), end="")
        return
    sys.stdout.flush()
    out.write(data)
    out.flush()


def print_sweep_plans(swept: tuple[str, list[str]], plans: list,
                      request: requests.PlanRequest) -> int:
    """`wl plan` of a sweep: a row per point, then the first point's dry-run (or, with
    `--json`, every plan in a JSON object)."""
    from tabulate import tabulate

    from workloadlang.plan import sweeppoints
    from workloadlang.plan.dryrun import render_plan

    name, values = swept
    if request.json:
        from workloadlang.plan.assemble import PLAN_JSON

        head = json.dumps({"param": name, "values": values}, indent=2)[:-2]
        write_bytes(head.encode() + b',\n  "plans": [\n' + b",\n".join(
            PLAN_JSON.dump_json(p, indent=2) for p in plans) + b"\n  ]\n}\n")
        return ExitCode.OK
    rows = [[v, f"{p.totals.requests:,}", f"{p.totals.prompt_tokens:,}",
             f"{p.totals.expected_cached_tokens:,}", f"{p.totals.working_set_tokens:,}",
             p.concurrency, p.plan_hash] for v, p in zip(values, plans)]
    print(f"sweep {name}: {len(values)} runs, one per value, into one results file\n")
    print(tabulate(rows, headers=[name, "requests", "prompt tokens", "exp. cached",
                                  "working set", "concurrency", "plan"],
                   tablefmt="simple", disable_numparse=True))
    flag = f"--{name.replace('_', '-')}"
    base = sweeppoints.sweep_salt(plans[0].salt, name, values[0])
    print(f"\nthe first run ({name}={values[0]}, salt {plans[0].salt}); `wl plan ... --salt "
          f"{base}/{name}=VALUE {flag} VALUE` shows another:\n")
    print(render_plan(plans[0], full=request.full), end="")
    return ExitCode.OK


def cmd_list(args: argparse.Namespace, extra: list[str]) -> int:
    from tabulate import tabulate

    from workloadlang.resources import bundled_workloads, probe_workloads

    for title, found in (("workload", bundled_workloads()),
                         ("wl probe's experiment", probe_workloads())):
        rows = []
        for name, path in found:
            source = api.Source(name=f"{name}.wl", text=path.read_text(encoding="utf-8"))
            wl = api.parse_checked(source)
            params = ", ".join(
                p.name + ("" if p.default is not None else " (required)") for p in wl.params)
            rows.append([name, wl.doc, params])
        if title != "workload":
            print()
        print(tabulate(rows, headers=[title, "what it measures", "params"], tablefmt="simple",
                       maxcolwidths=[None, 50, 60]))
    return ExitCode.OK


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    from workloadlang.cli.run import run_command

    return run_command(requests.run_request(args, extra))


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from workloadlang.compare import CompareRequest, compare_command

    return compare_command(CompareRequest(a=args.a, b=args.b))


def cmd_report(args: argparse.Namespace, extra: list[str]) -> int:
    from workloadlang.report import ReportRequest, report_command

    no_extra(extra)
    return report_command(ReportRequest(results=tuple(args.results), output=args.output))


def cmd_probe(args: argparse.Namespace, extra: list[str]) -> int:
    from workloadlang.cli.probe import probe_command

    return probe_command(requests.probe_request(args, extra))


def cmd_sim(args: argparse.Namespace, extra: list[str]) -> int:
    no_extra(extra)
    return serve_command(requests.serve_request(args))


def serve_command(request: requests.ServeRequest) -> int:
    """`wl sim serve`: the simulator on `host:port` until Ctrl-C; 2 when it cannot listen."""
    from workloadlang.sim import serve

    eprint(f"simulator on http://{request.host}:{request.port}/v1 (preset {request.preset}); "
           "Ctrl-C stops")
    try:
        serve(request.sim, host=request.host, port=request.port)
    except OSError as exc:
        eprint(f"error: cannot listen on {request.host}:{request.port}: {exc}")
        return ExitCode.USAGE
    return ExitCode.OK


# ---------------------------------------------------------------- parser


def build_parser(params_help: str | None = None) -> argparse.ArgumentParser:
    """The `wl` command's parser; `params_help`: a workload's params, shown after the options
    of `wl plan` and `wl run` (`wl run FILE --help`)."""
    shown: dict[str, Any] = {"epilog": params_help, "formatter_class": argparse.RawDescriptionHelpFormatter} \
        if params_help else {}
    ap = argparse.ArgumentParser(prog="wl", description="workloadlang: measure what an "
                                 "inference engine's prefix cache really keeps")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check .wl files (exit 0 valid, 2 not)")
    c.add_argument("workloads", nargs="+")
    c.add_argument("--format", choices=["text", "json"], default="text")
    # No abbreviations on plan/run: a param flag such as `--max` must not be read as `--max-context`.
    p = sub.add_parser("plan", help="dry-run: print the token schedule, send nothing",
                       allow_abbrev=False, **shown)
    add_plan_args(p)
    add_plan_view_args(p)
    sub.add_parser("list", help="the bundled workloads")
    r = sub.add_parser("run", help="run a workload against an endpoint (or --sim)",
                       allow_abbrev=False, **shown)
    add_plan_args(r)
    add_run_args(r)
    cmp_ = sub.add_parser("compare", help="compare two results files of the same workload")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    rep = sub.add_parser("report", help="results JSON files -> one self-contained HTML report")
    rep.add_argument("results", nargs="+",
                     help="results files (wl run --output) of one workload; several overlay")
    rep.add_argument("-o", "--output", default="report.html",
                     help="the HTML file (default: %(default)s)")
    pr = sub.add_parser("probe", help="an engine's cache card: capacity per tier, granularity, "
                        "eviction order, restore speed, idle lifetime, abort retention, "
                        "integrity (docs/probe.md)", allow_abbrev=False)
    from workloadlang.cli.probe import add_probe_args

    add_probe_args(pr)
    s = sub.add_parser("sim", help="the embedded simulator")
    ssub = s.add_subparsers(dest="sim_command", required=True)
    serve = ssub.add_parser("serve", help="serve the simulator on loopback")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8000)
    from workloadlang.sim import add_sim_arguments

    add_sim_arguments(serve)
    return ap


COMMANDS = {"check": cmd_check, "plan": cmd_plan, "list": cmd_list, "run": cmd_run,
            "compare": cmd_compare, "report": cmd_report, "probe": cmd_probe, "sim": cmd_sim}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # `wl run FILE --help`: the workload's params after the options
    ap = build_parser(workload_help(argv))
    args, extra = ap.parse_known_args(argv)
    try:
        return COMMANDS[args.command](args, extra)
    except UsageError as e:
        eprint(f"wl {args.command}: error: {e}")
        return ExitCode.USAGE
    except api.NotFound as e:
        eprint(f"wl {args.command}: error: {e}")
        return ExitCode.USAGE
    except SystemExit as e:
        return int(e.code or 0)
    except KeyboardInterrupt:
        eprint("interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK


