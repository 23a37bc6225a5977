"""`wl probe`: an engine's cache card (docs/probe.md), and what changed between two cards.

Input: a `ProbeRequest` (cli/requests.py; the parser's options are `add_probe_args`). Output: progress on stderr while it runs, the card on stdout, `--output`
(the card's JSON) and `--report` (the card as an HTML page), and the exit code (docs/cli.md): 0
the card was made, 2 usage, 3 the engine is unreachable or unusable (the card, every property
unknown, is still written when asked), 4 a budget left an experiment out, 5 a file went to a
fallback path, 130 interrupted (the card of what was measured is written).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloadlang.card import Card, CardFileError, Property, read_card
from workloadlang.card.cardtext import render_card, render_compare
from workloadlang.cli.arguments import positive_seconds, salt_text, token_count
from workloadlang.cli.common import eprint
from workloadlang.cli.outputs import deliver
from workloadlang.cli.requests import ProbeRequest
from workloadlang.redact import redact, redact_value
from workloadlang.results import ExitCode

if TYPE_CHECKING:
    from workloadlang.probe import ProbeOptions


def add_probe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", nargs="?", help="the engine's OpenAI base URL (or --sim)")
    p.add_argument("--sim", action="store_true", help="probe the embedded simulator")
    p.add_argument("--model", help="model id (default: auto-detected from /models)")
    p.add_argument("--api-key", help="bearer token (never written to any output)")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="read the bearer token from this environment variable")
    p.add_argument("--budget-tokens", type=token_count, metavar="N",
                   help="the most tokens the engine may prefill for the probe (default: no "
                        "bound)")
    p.add_argument("--time-budget", type=positive_seconds, metavar="SECONDS",
                   help="stop starting experiments after this many seconds (exit 4)")
    p.add_argument("--idle", type=gaps, default=(1.0, 10.0), metavar="GAPS",
                   help="idle gaps to try, e.g. 1s,10s,60s (default: 1s,10s)")
    kv = p.add_mutually_exclusive_group()
    kv.add_argument("--kv-bytes-per-token", type=float, metavar="N",
                    help="the KV cache's bytes per token: restore speeds also in GB/s")
    kv.add_argument("--kv-shape", type=kv_shape, metavar="LAYERS,KV_HEADS,HEAD_DIM[,BYTES]",
                    help="the same from the model's shape: 2 x layers x kv heads x head dim x "
                         "bytes (default 2, fp16)")
    p.add_argument("--salt", type=salt_text, help="the experiments' text (default: fresh)")
    p.add_argument("--output", "-o", help="write the card's JSON here")
    p.add_argument("--report", metavar="FILE", help="write the card as an HTML page here")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="what changed between two cards (nothing is sent)")
    from workloadlang.sim import add_sim_arguments

    add_sim_arguments(p, prefix="sim-")
    p.set_defaults(workers=None, ray=None)  # the simulator listens on the loopback (`start_sim`)


def gaps(text: str) -> tuple[float, ...]:
    """An argparse type: idle gaps as durations (`1s,10s,60s`, `500ms`)."""
    from workloadlang.evaluate import split_number

    out = []
    for item in text.split(","):
        parsed = split_number(item.strip())
        if parsed is None or parsed[1] != "duration" or parsed[0] <= 0:
            raise argparse.ArgumentTypeError(f"expected durations like 1s,10s,60s, got `{text}`")
        out.append(parsed[0])
    return tuple(sorted(out))


def kv_shape(text: str) -> float:
    """An argparse type: `LAYERS,KV_HEADS,HEAD_DIM[,BYTES]` -> bytes per token (K and V)."""
    try:
        nums = [float(x) for x in text.split(",")]
    except ValueError:
        nums = []
    if len(nums) not in (3, 4) or any(n <= 0 for n in nums):
        raise argparse.ArgumentTypeError(f"expected LAYERS,KV_HEADS,HEAD_DIM[,BYTES], got "
                                         f"`{text}`")
    layers, heads, dim = nums[:3]
    return 2 * layers * heads * dim * (nums[3] if len(nums) == 4 else 2)


def probe_command(request: ProbeRequest) -> int:
    """`wl probe`: the arguments checked, the simulator started or the engine reached, the
    experiments run, the card shown and written. Output: the exit code."""
    if request.compare:
        return compare(request.compare)
    problem = preflight(request)
    if problem:
        eprint(f"wl probe: error: {problem}")
        return ExitCode.USAGE
    from workloadlang.cli.run import start_sim

    with ExitStack() as stack:
        try:
            base = (start_sim(request.sim, request.sim_preset, stack)
                    if request.sim is not None else str(request.url).rstrip("/"))
        except RuntimeError as e:  # the simulator could not listen or start
            eprint(f"wl probe: error: {e}")
            return ExitCode.ENDPOINT
        try:
            card = asyncio.run(probe_async(request, base))
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
    secret = request.api_key.get_secret_value() if request.api_key else None
    card = Card.model_validate(redact_value(card.model_dump(by_alias=True), secret))
    print(render_card(card), end="")
    return deliver_card(card, request)


def preflight(request: ProbeRequest) -> str | None:
    """What is wrong before anything is sent (exit 2): the URL, the files to write."""
    from workloadlang.cli.run import check_base_url, check_output_path

    if request.sim is None:
        if not request.url:
            return "give the engine's base URL (wl probe http://HOST:PORT/v1) or --sim"
        problem = check_base_url(request.url)
        if problem:
            return problem
    for flag, path in (("--output", request.output), ("--report", request.report)):
        problem = path and check_output_path(path)
        if problem:
            return f"{flag} {path}: {problem}"
    if request.output and request.report and os.path.realpath(request.output) == \
            os.path.realpath(request.report):
        return f"--output and --report name the same file {request.output}"
    return None


async def probe_async(request: ProbeRequest, base: str) -> Card:
    """Open the engine and run the probe (an unreachable engine: a card of unknowns)."""
    from workloadlang import api
    from workloadlang.cli.run import install_interrupt
    from workloadlang.probe import probe

    secret = request.api_key.get_secret_value() if request.api_key else None
    progress = Progress(secret)
    try:
        async with api.open_engine(base, request.api_key, model=request.model,
                                   sim=request.sim is not None) as engine:
            task = asyncio.ensure_future(probe(engine, request.options, progress))
            install_interrupt(task)
            return await task
    except api.EndpointError as e:
        return unreachable(base, str(e), request.options)


def unreachable(base: str, why: str, options: ProbeOptions) -> Card:
    """The card of an engine that could not be used: every property unknown, exit 3."""
    from workloadlang.card import PROPERTIES
    from workloadlang.probe.stages import options_of

    reason = f"the engine could not be used: {why}"
    eprint(f"wl probe: endpoint error: {why}")
    return Card(engine={"base_url": base}, options=options_of(options),
                properties={n: Property(status="unknown", reason=reason) for n in PROPERTIES},
                exit_code=ExitCode.ENDPOINT)


class Progress:
    """Progress on stderr: each experiment as it starts (what is left and its estimate), and
    a line at most every few seconds with the requests and tokens so far."""

    def __init__(self, secret: str | None, every_s: float = 2.0) -> None:
        self.secret, self.every_s, self.last = secret, every_s, 0.0

    def __call__(self, event: dict[str, Any]) -> None:
        if "stage" in event:
            est = event.get("estimate") or {}
            left = ", ".join(event.get("left") or ())
            bits = [f"{est['idle_s']:g} s of idle waits" if est.get("idle_s") else "",
                    f"~{est['abort_tokens']:,} tokens to cut" if est.get("abort_tokens") else "",
                    f"capacity: {est['capacity']}" if est.get("capacity") else ""]
            more = "; ".join(b for b in bits if b)
            eprint(redact(f"probe: {event['stage']} (left: {left}{'; ' + more if more else ''})",
                          self.secret))
            return
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            eprint(f"probe:   {event['experiment']}: {event['requests']:,} requests, "
                   f"{event['prefilled']:,} tokens prefilled, {event['elapsed_s']:.0f} s")


def deliver_card(card: Card, request: ProbeRequest) -> int:
    """`--output` and `--report` (each at its path or a fallback); the exit code."""
    deliveries = []
    if request.output:
        text = card.to_json()
        deliveries.append(deliver("--output", request.output,
                                  lambda p: Path(p).write_text(text, encoding="utf-8")))
    if request.report:
        from workloadlang.report.cardpage import card_page

        page = card_page(card)
        deliveries.append(deliver("--report", request.report,
                                  lambda p: Path(p).write_text(page, encoding="utf-8")))
    missed = [d for d in deliveries if d.error]
    for d in missed:
        where = f"written to {d.written} instead" if d.written else "not written anywhere"
        eprint(f"wl probe: {d.flag} {d.asked}: {d.error}; {where} (exit {ExitCode.WRITE:d})")
    return ExitCode.WRITE if missed else card.exit_code


def compare(paths: tuple[str, str]) -> int:
    """`wl probe --compare A.json B.json`: what changed (exit 2 for a file that is no card)."""
    try:
        a, b = read_card(paths[0]), read_card(paths[1])
    except CardFileError as e:
        eprint(f"wl probe: error: {e}")
        return ExitCode.USAGE
    sys.stdout.write(render_compare(a, b, (paths[0], paths[1])))
    return ExitCode.OK
