"""The `wl` command line (docs/cli.md): `main` (argv -> exit code), over `workloadlang.api`.

`main.py` builds the parser and runs a command; `common.py` loads and plans a workload from the
command line; `run.py` wires `wl run`; `outputs.py` writes what a run asks for.
"""

from workloadlang.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
