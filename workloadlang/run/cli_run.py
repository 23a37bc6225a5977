"""`wl run`: wire the command line to discovery, planning, the runner and the views.

Input: parsed args plus the param flags. Output: files (`--records`, `--output`), the summary on
stdout, and the exit code (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import ExitStack

from pydantic import SecretStr

from workloadlang.run.client import Endpoint, root_of
from workloadlang.run.errors import EndpointError
from workloadlang.run.runner import (
    EXIT_ENDPOINT,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    JsonlWriter,
    Tee,
    run_plan,
)



def api_key(args) -> SecretStr | None:
    if args.api_key:
        return SecretStr(args.api_key)
    if args.api_key_env:
        value = os.environ.get(args.api_key_env)
        if not value:
            raise EndpointError("unreachable", f"--api-key-env {args.api_key_env}: not set")
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
    cfg = config_from_args(args)
    start = start_in_process if os.name == "posix" else start_in_thread
    handle = stack.enter_context(start(cfg))
    faults = ", ".join(f.name for f in cfg.faults)
    print(f"simulator: {handle.base_url} (preset {args.sim_preset}"
          + (f", faults {faults}" if faults else "") + ")", file=sys.stderr)
    return handle.base_url


def run_command(args, extra) -> int:
    from workloadlang.cli import eprint

    with ExitStack() as stack:
        try:
            key = api_key(args)
        except EndpointError as e:
            eprint(f"wl run: error: {e}")
            return EXIT_USAGE
        try:
            base = start_sim(args, args.workload, stack) if args.sim else args.base_url.rstrip("/")
        except ValueError as e:
            eprint(f"wl run: error: {e}")
            return EXIT_USAGE
        except RuntimeError as e:  # the simulator could not listen or start
            eprint(f"wl run: error: {e}")
            return EXIT_ENDPOINT
        try:
            return asyncio.run(main_async(args, extra, base, key))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED


async def main_async(args, extra, base: str, key: SecretStr | None) -> int:
    from workloadlang.cli import eprint, load_and_plan
    from workloadlang.run import discover as disc
    from workloadlang.run.view import make_view

    from workloadlang.run.transport import make_client

    async with make_client() as client:
        try:
            info = await disc.discover(client, base, key, model=args.model,
                                       max_context=args.max_context)
        except EndpointError as e:
            eprint(f"wl run: endpoint error: {e}")
            return EXIT_ENDPOINT
        for note in info.notes:
            eprint(f"note: {note}")
        _, _, plan = load_and_plan(args, extra, {"max_context": info.max_context})
        endpoint = Endpoint(base_url=base, root_url=root_of(base), model=info.model, api_key=key,
                            cached_zero_when_absent=args.cached_zero_when_absent)
        tokenizer = disc.Tokenizer.from_info(client, info, key)
        engine = {"base_url": base, "model": info.model, "engine": info.engine,
                  "max_context": info.max_context, "max_context_source": info.max_context_source,
                  "tokenizer": info.tokenize_style, "notes": info.notes, "sim": bool(args.sim),
                  "slots": info.slots, "prefill_own": info.prefill_own}
        view = make_view(plan, args.viz, sys.stdout)
        writer = JsonlWriter(args.records)
        view.start()
        task = asyncio.ensure_future(run_plan(
            plan, endpoint, engine, tokenizer, Tee(writer, view), client=client,
            metrics_url=info.metrics_url, time_budget_s=args.time_budget))
        install_interrupt(task)
        try:
            results = await task
        except EndpointError as e:  # calibration could not use the engine (its tokenizer failed)
            eprint(f"wl run: endpoint error: {e}")
            return EXIT_ENDPOINT
        finally:
            view.stop()
            writer.close()
        if args.engine_log:
            from workloadlang.run.annotate import annotate_results

            annotate_results(results, args.engine_log)
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(results.to_json())
        if args.report:
            write_html(results, args.report)
        view.summary(results)
        return results.exit_code


def write_html(results, path: str) -> None:
    from workloadlang.cli import eprint
    from workloadlang.report import write_report
    from workloadlang.report.render import ReportError

    try:
        write_report([results], path)
    except (OSError, ReportError) as e:
        eprint(f"wl run: report not written: {e}")


def install_interrupt(task: asyncio.Future) -> None:
    """Ctrl-C cancels the run; the runner judges and writes what was measured."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
        pass
