"""`wl run`: the command line wired to the simulator, the engine, the run and the views.

Input: a `RunRequest` (cli/requests.py). Output: files (`--records`, `--output`, `--report`),
the live view or plain lines and the summary on stdout, and the exit code (docs/cli.md). The
workload is read, checked and its params resolved before the simulator starts or the engine
is reached (and planned then too when `--max-context` says the context limit).
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, TextIO, cast
from urllib.parse import urlsplit

from workloadlang.api import PlannedRuns
from workloadlang.cli.common import Prepared, UsageError, eprint, plan_runs, prepare
from workloadlang.cli.outputs import Delivery, JsonlWriter, Tee, deliver, redacted
from workloadlang.cli.requests import RunRequest
from workloadlang.redact import mentions, redact
from workloadlang.results import ExitCode
from workloadlang.scale.workers import Workers

if TYPE_CHECKING:
    from workloadlang.sim import SimConfig


def start_sim(sim: SimConfig, preset: str | None, stack: ExitStack,
              workers: Workers = Workers()) -> str:
    """Start the simulator `sim` (of the preset named), stopped when `stack` closes. Output:
    its base URL. It serves from a child process (POSIX): in this process it would share the
    interpreter lock with the client measuring it, and the client's socket reader would see
    its first tokens late (docs/simulator.md, `start_in_process`)."""
    from workloadlang.scale.workers import sim_host
    from workloadlang.sim import start_in_process, start_in_thread

    start = start_in_process if os.name == "posix" else start_in_thread
    handle = stack.enter_context(start(sim, host=sim_host(workers)))
    faults = ", ".join(f.name for f in sim.faults)
    print(f"simulator: {handle.base_url} (preset {preset}"
          + (f", faults {faults}" if faults else "") + ")", file=sys.stderr)
    return handle.base_url


def run_command(request: RunRequest) -> int:
    """`wl run`: the arguments checked, the workload read, checked and (when the engine's
    context limit is not needed, `--max-context` given) planned, then the simulator started
    or the engine reached, the runs made and their files written. Output: the exit code."""
    problem = preflight(request)
    if problem:
        eprint(f"wl run: error: {problem}")
        return ExitCode.USAGE
    if request.search is not None and request.plan.sweep:
        raise UsageError("--search and --sweep: run one or the other")
    # checked before the simulator starts or the engine is reached
    prepared = prepare(request.plan, request.search)
    runs = None if prepared.search is not None or request.plan.max_context is None else \
        plan_runs(prepared, {"max_context": request.plan.max_context})
    with ExitStack() as stack:
        try:
            base = (start_sim(request.sim, request.sim_preset, stack, request.workers)
                    if request.sim is not None else request.base_url.rstrip("/"))
        except RuntimeError as e:  # the simulator could not listen or start
            eprint(f"wl run: error: {e}")
            return ExitCode.ENDPOINT
        try:
            return asyncio.run(main_async(request, prepared, base, runs))
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED


def preflight(request: RunRequest) -> str | None:
    """What is wrong with `wl run`'s arguments before anything is sent (exit 2), or None: the
    endpoint URL, the files to write (their folder exists and is writable, none is a folder,
    two flags do not name one file, none overwrites an input), the engine log to read, and a
    sharded run's workers (`scale.workers`: Ray installed)."""
    from workloadlang.scale import workers

    problem = workers.problem(request.workers)
    if problem:
        return problem
    if request.sim is None:
        problem = check_base_url(request.base_url)
        if problem:
            return problem
    inputs = {os.path.realpath(p) for p in (request.plan.workload, request.engine_log)
              if p and os.path.exists(p)}
    seen: dict[str, str] = {}
    for flag, path in (("--output", request.output), ("--records", request.records),
                       ("--report", request.report)):
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
    return check_engine_log(request.engine_log)


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
    if not stat.S_ISREG(os.stat(path).st_mode):
        return (f"--engine-log {path}: not a regular file (a pipe or device would block the "
                "read: copy the log to a file)")
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return f"--engine-log {path}: {exc.strerror or exc}"


async def main_async(request: RunRequest, prepared: Prepared, base: str,
                     runs: PlannedRuns | None) -> int:
    """The engine reached, then the runs: the plans (`runs`, or made now with the engine's
    context limit), a sweep's points in order, or a rate search's one at a time. Output: the
    exit code."""
    from workloadlang import api
    from workloadlang.scale import ScaleError

    key = request.api_key
    secret = key.get_secret_value() if key is not None else None
    writer: JsonlWriter | None = None
    points, searched, swept = [], None, None
    try:
        async with api.open_engine(base, key, model=request.model,
                                   max_context=request.plan.max_context,
                                   cached_zero_when_absent=request.cached_zero_when_absent,
                                   idle_timeout_s=request.idle_timeout_s,
                                   sim=request.sim is not None) as engine:
            for note in engine.info.notes:
                eprint(f"note: {redact(note, secret)}")
            env = {"max_context": engine.info.max_context}
            if prepared.search is not None:
                from workloadlang.cli.search import run_search

                writer = search_writer = JsonlWriter(request.records)
                search = api.RateSearch(prepared.wl, prepared.source, prepared.options,
                                        prepared.search, env)
                searched = await run_search(
                    search, prepared.source,
                    lambda plan: run_one(plan, engine, request, search_writer, secret),
                    lambda param, value, i: search_writer.write(
                        {"type": "sweep_point", "param": param, "value": value, "index": i}))
                plans, makers = [], []
            else:
                runs = runs or plan_runs(prepared, env)
                swept, plans, makers = runs.swept, runs.plans, runs.replans
                writer = JsonlWriter(request.records)
            for i, (plan, replan) in enumerate(zip(plans, makers)):
                if swept is not None:  # the records of each point follow their marker
                    writer.write({"type": "sweep_point", "param": swept[0],
                                  "value": swept[1][i], "index": i})
                    print(f"── sweep {swept[0]}={swept[1][i]} ({i + 1} of {len(plans)}) ──")
                results = await run_one(plan, engine, request, writer, secret, replan)
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
        return finish_sweep(None, [], request, writer, searched)
    if swept is None:
        deliveries = [d for d in (writer.delivery, *write_outputs(points[0], request)) if d]
        return report_deliveries(deliveries, points[0].exit_code)
    return finish_sweep(swept, points, request, writer)


async def run_one(plan, engine, request: RunRequest, writer: JsonlWriter, secret: str | None,
                  replan=None):
    """Run one plan through the API with its own view (`replan`: how to make it again with what
    the calibration learns). Output: its results (redacted: what is written and printed from
    here on). Raises `EndpointError` when the engine could not be used."""
    from workloadlang import api
    from workloadlang.console import make_view
    from workloadlang.scale.workers import runner_for

    # the views write and ask `isatty`, which is all a `Redacting` stream has of `IO[str]`
    view = make_view(plan, request.viz, cast(IO[str], Redacting(sys.stdout, secret)))
    view.start()
    options = api.RunOptions(time_budget_s=request.time_budget_s, isolation=request.isolation,
                             replan=replan)
    task = asyncio.ensure_future(runner_for(request.workers)(
        plan, engine, Tee(writer, view, secret), options))
    install_interrupt(task)
    try:
        results = await task
    finally:
        view.stop()
    if request.engine_log:
        from workloadlang.enginelog.annotate import annotate_results, summary_line

        eprint(redact(summary_line(annotate_results(results, request.engine_log)), secret))
    results = redacted(results, secret)
    view.summary(results)
    return results


def finish_sweep(swept: tuple[str, list[str]] | None, points: list, request: RunRequest,
                 writer: JsonlWriter, result=None) -> int:
    """A sweep's results file (`--output`; `--report`: its curves) and table; the exit code
    of its worst point (a rate search's `result` given whole: its own exit code)."""
    from workloadlang import sweepresults
    from workloadlang.plan.sweeppoints import sweep_salt

    if result is None:
        assert swept is not None  # a sweep's points, not a rate search's
        result = sweepresults.SweepResults(
            workload=points[0].workload, param=swept[0], values=swept[1][:len(points)],
            points=points, salt=sweep_salt(points[0].salt, swept[0], swept[1][0]),
            exit_code=sweepresults.worst_exit([p.exit_code for p in points]))
        print(f"\n── sweep {swept[0]}: {len(points)} of {len(swept[1])} runs ──")
    else:
        print(f"\n── search {result.param}: {len(result.points)} runs ──")
    print(sweepresults.table(result))
    if result.search is not None:
        print(sweepresults.search_line(result))
    deliveries = [writer.delivery]
    if request.output:
        text = result.to_json()
        deliveries.append(deliver("--output", request.output,
                                  lambda p: Path(p).write_text(text, encoding="utf-8")))
    if request.report:
        deliveries.append(write_html(result, request.report))
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


def write_outputs(results, request: RunRequest) -> tuple[Delivery | None, Delivery | None]:
    """`--output` and `--report` written (or to a fallback): where each went."""
    output = report = None
    if request.output:
        text = results.to_json()
        output = deliver("--output", request.output,
                         lambda p: Path(p).write_text(text, encoding="utf-8"))
    if request.report:
        report = write_html(results, request.report)
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
