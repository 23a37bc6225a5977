"""`python -m workloadlang.sim [--host H] [--port P] [sim flags]`: serve a simulator (blocking).

Input: command-line flags (see `add_sim_arguments`). Output: an HTTP server until interrupted.
The `wl sim serve` CLI command is the user-facing entry point; this module serves benchmarks.
"""

from __future__ import annotations

import argparse
import sys

from .config import add_sim_arguments, config_from_args
from .server import serve, serve_inherited


def main(argv: list[str] | None = None) -> int:
    """Parse flags and serve; returns the exit status (2 on a bad configuration)."""
    parser = argparse.ArgumentParser(prog="python -m workloadlang.sim")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    add_sim_arguments(parser)
    # `start_in_process`: serve on an inherited socket, the configuration on stdin
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.listen_fd is not None and ns.ready_fd is not None:
        serve_inherited(ns.listen_fd, ns.ready_fd)
        return 0
    try:
        config = config_from_args(ns)
    except ValueError as exc:
        parser.error(str(exc))
        return 2
    serve(config, ns.host, ns.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
