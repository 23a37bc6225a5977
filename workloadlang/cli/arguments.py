"""The `wl` command's options: the argparse types of its values and the options of `wl plan`
and `wl run` (cheap to import: nothing of the runner is imported until a run starts).

Input: an `argparse.ArgumentParser`. Output: the parser with the options added; each type turns
a command-line word into a value or raises `argparse.ArgumentTypeError` (exit 2 with argparse's
message).
"""

from __future__ import annotations

import argparse
import math
import unicodedata

DEFAULT_CACHE_BLOCK = 16

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


def add_plan_view_args(p: argparse.ArgumentParser) -> None:
    """`wl plan`'s own options: how the plan is shown."""
    p.add_argument("--json", action="store_true", help="the full plan as JSON")
    p.add_argument("--full", action="store_true", help="list every request")
    p.add_argument("--format", choices=["text", "json"], default="text", help=argparse.SUPPRESS)


def command_flags() -> frozenset[str]:
    """The long options of `wl plan` and `wl run` without their dashes (`output`, `sim-slots`,
    `help`): a param whose flag is one of them is an error (WL234), in every command alike."""
    p = argparse.ArgumentParser()
    add_plan_args(p)
    add_plan_view_args(p)
    add_run_args(p)
    return frozenset(flag[2:] for a in p._actions for flag in a.option_strings
                     if flag.startswith("--"))


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (`--time-budget`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def share(text: str) -> float:
    """An argparse type: a share above 0 and under 1, as `5%` or `0.05`."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a share above 0 and under 1 (5% or 0.05), "
                                         f"got {text!r}")
    return value


def worker_count(text: str) -> int:
    """An argparse type: a whole number of workers, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of workers, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def add_scale_args(p: argparse.ArgumentParser) -> None:
    """`wl run`'s `--workers` and `--ray` (`scale.workers.Workers`)."""
    from workloadlang.scale.workers import INSTALL_HINT

    p.add_argument("--workers", type=worker_count, metavar="N",
                   help="shard the run by session over N Ray workers, merged into one result "
                        f"(needs Ray: {INSTALL_HINT}; docs/scale-out.md)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="the Ray cluster to run the workers on (default: a local Ray instance "
                        "started for the run)")


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
    p.add_argument("--records", help="write one JSON line per request as it completes (a "
                   "stretch timed alone that may be measured again: once it ends)")
    p.add_argument("--report", metavar="FILE", help="also write the HTML report here")
    p.add_argument("--time-budget", type=positive_seconds,
                   help="stop after this many seconds (exit 4)")
    p.add_argument("--idle-timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                   help="cut an answer that sends nothing this long after its first token "
                        "(default: %(default)g)")
    p.add_argument("--engine-log", help="annotate records with a ninfer request log (JSONL)")
    p.add_argument("--search", metavar="NAME=LOW..HIGH",
                   help="find the highest value of a param (a rate) whose runs meet the "
                        "workload's SLOs: a run per value tried, into one results file")
    p.add_argument("--search-precision", type=share, default=0.05, metavar="SHARE",
                   help="stop when the highest value sustained and the lowest not are this "
                        "close (default 5%%)")
    p.add_argument("--search-runs", type=positive_int, default=12, metavar="N",
                   help="run at most this many values (default %(default)s)")
    p.add_argument("--no-isolation", action="store_true",
                   help="send the requests marked `isolated` with the others (a load test: "
                        "the verdicts that read them may then be unknown)")
    from workloadlang.sim import add_sim_arguments

    add_scale_args(p)  # --workers, --ray
    # --sim-preset (default: the workload's name when it is a preset), --sim-<field>, --sim-fault
    add_sim_arguments(p, prefix="sim-")
    viz = p.add_mutually_exclusive_group()
    viz.add_argument("--viz", dest="viz", action="store_true", default=None,
                     help="live view even when stdout is not a terminal")
    viz.add_argument("--no-viz", dest="viz", action="store_false",
                     help="plain lines, one per request")
