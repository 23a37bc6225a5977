"""`wl run`'s options, kept apart from the runner so building the CLI parser stays cheap.

Input: an argparse parser. Output: the parser with `wl run`'s options (and the simulator's,
prefixed `--sim-`).
"""

from __future__ import annotations

import argparse
import math


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (`--time-budget`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", default="http://localhost:8000/v1",
                   help="OpenAI-compatible base URL (default: %(default)s)")
    p.add_argument("--model", help="model id (default: auto-detected from /models)")
    p.add_argument("--api-key", help="bearer token (never written to any output)")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="read the bearer token from this environment variable")
    p.add_argument("--cached-zero-when-absent", action="store_true",
                   help="the engine leaves out cached_tokens when it is 0 (vLLM "
                        "--enable-prompt-tokens-details, SGLang --enable-cache-report)")
    p.add_argument("--sim", action="store_true", help="run against the embedded simulator")
    p.add_argument("--output", "-o", help="write the summary JSON here")
    p.add_argument("--records", help="write one JSON line per request as it completes")
    p.add_argument("--report", metavar="FILE", help="also write the HTML report here")
    p.add_argument("--time-budget", type=positive_seconds,
                   help="stop after this many seconds (exit 4)")
    p.add_argument("--idle-timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                   help="cut an answer that sends nothing this long after its first token "
                        "(default: %(default)g)")
    p.add_argument("--engine-log", help="annotate records with a ninfer request log (JSONL)")
    p.add_argument("--no-isolation", action="store_true",
                   help="send the requests marked `isolated` with the others (a load test: "
                        "the verdicts that read them may then be unknown)")
    from workloadlang.sim import add_sim_arguments

    # --sim-preset (default: the workload's name when it is a preset), --sim-<field>, --sim-fault
    add_sim_arguments(p, prefix="sim-")
    viz = p.add_mutually_exclusive_group()
    viz.add_argument("--viz", dest="viz", action="store_true", default=None,
                     help="live view even when stdout is not a terminal")
    viz.add_argument("--no-viz", dest="viz", action="store_false",
                     help="plain lines, one per request")
