"""`wl run`: the command line wired to the simulator, the engine, the run and the views.

Input: parsed args plus the param flags. Output: files (`--records`, `--output`, `--report`),
the live view or plain lines and the summary on stdout, and the exit code (docs/cli.md).
`add_run_args` adds the options to the parser (cheap: nothing of the runner is imported until
a run starts).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from pydantic import SecretStr

from workloadlang.cli.common import config_error, eprint, load_and_plan_sweep
from workloadlang.cli.outputs import Delivery, JsonlWriter, Tee, deliver, redacted
from workloadlang.redact import mentions, redact
from workloadlang.results import ExitCode


class KeyNotSet(Exception):
    """`--api-key-env NAME` names a variable that is not set."""


def api_key(args) -> SecretStr | None:
    if args.api_key:
        return SecretStr(args.api_key)
    if args.api_key_env:
        value = os.environ.get(args.api_key_env)
        if not value:
            raise KeyNotSet(f"--api-key-env {args.api_key_env}: not set")
        return SecretStr(value)
    return None


def start_sim(args, workload: str, stack: ExitStack) -> str:
    """Start the simulator `--sim` asks for, stopped when `stack` closes. Output: its base URL.
    It serves from a child process (POSIX): in this process it would share the interpreter lock
    with the client measuring it, and the client's socket reader would see its first tokens
    late (docs/simulator.md, `start_in_process`)."""
    from workloadlang.sim import PRESETS, config_from_args, start_in_process, start_in_thread

    if args.sim_preset is None:
        args.sim_preset = workload if workload in PRESETS else "default"
    from workloadlang.scale.workers import sim_host

    cfg = config_from_args(args)
    start = start_in_process if os.name == "posix" else start_in_thread
    handle = stack.enter_context(start(cfg, host=sim_host(args)))
    faults = ", ".join(f.name for f in cfg.faults)
    print(f"simulator: {handle.base_url} (preset {args.sim_preset}"
          + (f", faults {faults}" if faults else "") + ")", file=sys.stderr)
    return handle.base_url


def run_command(args, extra) -> int:
    problem = preflight(args)
    if problem:
        eprint(f"wl run: error: {problem}")
        return ExitCode.USAGE
    spec = None
    if args.search:  # checked before the simulator starts or the engine is reached
        from workloadlang.cli.search import prepare

        spec = prepare(args, extra)
    with ExitStack() as stack:
        try:
            key = api_key(args)
        except KeyNotSet as e:
            eprint(f"wl run: error: {e}")
            return ExitCode.USAGE
        try:
            base = start_sim(args, args.workload, stack) if args.sim else args.base_url.rstrip("/")
        except ValueError as e:
            eprint(f"wl run: error: {config_error(e, 'sim-')}")
            return ExitCode.USAGE
        except RuntimeError as e:  # the simulator could not listen or start
            eprint(f"wl run: error: {e}")
            return ExitCode.ENDPOINT
        try:
            return asyncio.run(main_async(args, extra, base, key, spec))
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED


def preflight(args) -> str | None:
    """What is wrong with `wl run`'s arguments before anything is sent (exit 2), or None: the
    endpoint URL, the files to write (their folder exists and is writable, none is a folder,
    two flags do not name one file, none overwrites an input), the engine log to read, and a
    sharded run's options (`scale.workers`: Ray installed)."""
    from workloadlang.scale import workers

    problem = workers.problem(args)
    if problem:
        return problem
    if not args.sim:
        problem = check_base_url(args.base_url)
        if problem:
            return problem
    inputs = {os.path.realpath(p) for p in (args.workload, args.engine_log)
              if p and os.path.exists(p)}
    seen: dict[str, str] = {}
    for flag, path in (("--output", args.output), ("--records", args.records),
                       ("--report", args.report)):
        if path is None:
            continue
        problem = check_output_path(path)
        real = os.path.realpath(path)
        if problem:
            return f"{flag} {path}: {problem}"
        if real in seen and not is_device(real):
            return f"{flag} and {seen[real]} name the same file {path}"
        if real in inputs:
            return f"{flag} {path}: that is an input of this run; it would be overwritten"
        seen[real] = flag
    return check_engine_log(args.engine_log)


def is_device(path: str) -> bool:
    """Whether `path` is there and no regular file (`/dev/null`: any number of flags may)."""
    return os.path.exists(path) and not os.path.isfile(path)


def check_base_url(url: str) -> str | None:
    """Why `--base-url` is no usable http(s) URL, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a port that is no number or out of range)
    except ValueError as exc:
        return f"--base-url {url}: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return (f"--base-url {url}: not an http(s) URL with a host "
                "(like http://127.0.0.1:8000/v1)")
    return None


def check_output_path(path: str) -> str | None:
    """Why a file cannot be written at `path`, as far as can be told without writing it."""
    if os.path.isdir(path):
        return "is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else "is not writable"
    return None if os.access(folder, os.W_OK | os.X_OK) else f"the folder {folder} is not writable"


def check_engine_log(path: str | None) -> str | None:
    """Why `--engine-log` cannot be read, or None (a log not there yet is read after the run,
    when the engine may have written it)."""
    if path is None or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return f"--engine-log {path}: is a directory"
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return f"--engine-log {path}: {exc.strerror or exc}"


async def main_async(args, extra, base: str, key: SecretStr | None, spec=None) -> int:
    from workloadlang import api
    from workloadlang.scale import ScaleError

    secret = key.get_secret_value() if key is not None else None
    writer: JsonlWriter | None = None
    points, searched = [], None
    try:
        async with api.open_engine(base, key, model=args.model, max_context=args.max_context,
                                   cached_zero_when_absent=args.cached_zero_when_absent,
                                   idle_timeout_s=args.idle_timeout, sim=bool(args.sim)) as engine:
            for note in engine.info.notes:
                eprint(f"note: {redact(note, secret)}")
            env = {"max_context": engine.info.max_context}
            if spec is not None:
                from workloadlang.cli.search import run_search

                writer = JsonlWriter(args.records)
                searched = await run_search(
                    spec, args, env, lambda plan: run_one(plan, engine, args, writer, secret),
                    lambda param, value, i: writer.write(
                        {"type": "sweep_point", "param": param, "value": value, "index": i}))
                plans = []
            else:
                _, _, swept, plans = load_and_plan_sweep(args, extra, env)
                writer = JsonlWriter(args.records)
            for i, plan in enumerate(plans):
                if swept is not None:  # the records of each point follow their marker
                    writer.write({"type": "sweep_point", "param": swept[0],
                                  "value": swept[1][i], "index": i})
                    print(f"── sweep {swept[0]}={swept[1][i]} ({i + 1} of {len(plans)}) ──")
                results = await run_one(plan, engine, args, writer, secret)
                points.append(results)
                if results.exit_code == ExitCode.INTERRUPTED:
                    break  # what was measured is kept; the points after it are not run
    except api.EndpointError as e:  # discovery, or calibration (the engine's tokenizer failed)
        eprint(f"wl run: endpoint error: {e}")
        return ExitCode.ENDPOINT
    except ScaleError as e:  # the workers cannot start as asked (`--workers`, `--ray`)
        eprint(f"wl run: error: {e}")
        return ExitCode.USAGE
    finally:
        if writer is not None:
            writer.close()
    if searched is not None:
        return finish_sweep(None, [], args, writer, searched)
    if swept is None:
        deliveries = [d for d in (writer.delivery, *write_outputs(points[0], args)) if d]
        return report_deliveries(deliveries, points[0].exit_code)
    return finish_sweep(swept, points, args, writer)


async def run_one(plan, engine, args, writer: JsonlWriter, secret: str | None):
    """Run one plan through the API with its own view. Output: its results (redacted: what is
    written and printed from here on). Raises `EndpointError` when the engine could not be
    used."""
    from workloadlang import api
    from workloadlang.console import make_view
    from workloadlang.scale.workers import runner_for

    view = make_view(plan, args.viz, Redacting(sys.stdout, secret))
    view.start()
    options = api.RunOptions(time_budget_s=args.time_budget, isolation=not args.no_isolation)
    task = asyncio.ensure_future(runner_for(args)(plan, engine, Tee(writer, view, secret),
                                                  options))
    install_interrupt(task)
    try:
        results = await task
    finally:
        view.stop()
    if args.engine_log:
        from workloadlang.enginelog.annotate import annotate_results, summary_line

        eprint(redact(summary_line(annotate_results(results, args.engine_log)), secret))
    results = redacted(results, secret)
    view.summary(results)
    return results


def finish_sweep(swept: tuple[str, list[str]] | None, points: list, args, writer: JsonlWriter,
                 result=None) -> int:
    """A sweep's results file (`--output`; `--report`: its curves) and table; the exit code
    of its worst point (a rate search's `result` given whole: its own exit code)."""
    from workloadlang import sweepresults
    from workloadlang.plan.sweeppoints import sweep_salt

    if result is None:
        result = sweepresults.SweepResults(workload=points[0].workload, param=swept[0],
                                    values=swept[1][:len(points)], points=points,
                                    salt=sweep_salt(points[0].salt, swept[0], swept[1][0]),
                                    exit_code=sweepresults.worst_exit([p.exit_code for p in points]))
        print(f"\n── sweep {swept[0]}: {len(points)} of {len(swept[1])} runs ──")
    else:
        print(f"\n── search {result.param}: {len(result.points)} runs ──")
    print(sweepresults.table(result))
    if result.search is not None:
        print(sweepresults.search_line(result))
    deliveries = [writer.delivery]
    if args.output:
        text = result.to_json()
        deliveries.append(deliver("--output", args.output,
                                  lambda p: Path(p).write_text(text, encoding="utf-8")))
    if args.report:
        deliveries.append(write_html(result, args.report))
    return report_deliveries([d for d in deliveries if d], result.exit_code)


class Redacting:
    """A text stream that writes through with the API key redacted (the live view and the
    plain lines print what came from the engine)."""

    def __init__(self, stream: TextIO, secret: str | None):
        self.stream, self.secret = stream, secret

    def write(self, text: str) -> int:
        self.stream.write(redact(text, self.secret) if mentions(text, self.secret) else text)
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def write_outputs(results, args) -> tuple[Delivery | None, Delivery | None]:
    """`--output` and `--report` written (or to a fallback): where each went."""
    output = report = None
    if args.output:
        text = results.to_json()
        output = deliver("--output", args.output,
                         lambda p: Path(p).write_text(text, encoding="utf-8"))
    if args.report:
        report = write_html(results, args.report)
    return output, report


def report_deliveries(deliveries: list[Delivery], exit_code: int) -> int:
    """Say where each file that missed its path went; the exit code: `ExitCode.WRITE` when
    one did, else the run's own."""
    missed = [d for d in deliveries if d.error]
    for d in missed:
        where = (f"written to {d.written} instead" if d.written
                 else "not written anywhere (the fallbacks failed too)")
        eprint(f"wl run: {d.flag} {d.asked}: {d.error}; {where} (exit {ExitCode.WRITE:d})")
    return ExitCode.WRITE if missed else exit_code


def write_html(results, path: str) -> Delivery | None:
    from workloadlang.report import write_report
    from workloadlang.report.render import ReportError

    try:
        return deliver("--report", path, lambda p: write_report([results], p))
    except ReportError as e:
        eprint(f"wl run: report not written: {e}")
        return None


def install_interrupt(task: asyncio.Future) -> None:
    """Ctrl-C cancels the run; the runner judges and writes what was measured."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
        pass
