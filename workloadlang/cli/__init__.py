"""The `wl` command line (docs/cli.md), over `workloadlang.api`.

`main.py` builds the parser and runs a command (`workloadlang.cli.main.main`: argv -> exit
code, the `wl` entry point); `common.py` loads and plans a workload from the command line;
`run.py` wires `wl run`; `outputs.py` writes what a run asks for. The package binds no name of
its own to one of its modules' names: `workloadlang.cli.main` is the module.
"""

from workloadlang.cli.main import build_parser

__all__ = ["build_parser"]
