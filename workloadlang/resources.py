"""Files shipped with the package: the grammar and the bundled workloads.

Input: a workload name such as `agent-sim`, or `probes/capacity` for one of `wl probe`'s
experiments. Output: the grammar text (`str`) and bundled workload files as
`importlib.resources.abc.Traversable` objects (read them with `.read_text()`).

In an installed wheel the files live inside the package at `workloadlang/_data/grammars/` and
`workloadlang/_data/workloads/` (pyproject's force-include); in a source checkout or an editable
install they are the repository's `grammars/` and `workloads/` next to the package.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11+; 3.10 has it in importlib.abc
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

GRAMMAR_FILE = "workload.lark"
WORKLOAD_SUFFIX = ".wl"
PROBES = "probes"  # the family of `wl probe`'s experiments: `probes/NAME`


def _data_dir(kind: str) -> Traversable:
    """The directory `kind` (`grammars` or `workloads`): packaged copy first, then the checkout."""
    packaged = resources.files("workloadlang").joinpath("_data").joinpath(kind)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / kind


def read_grammar() -> str:
    """The Lark grammar of the `.wl` language."""
    return _data_dir("grammars").joinpath(GRAMMAR_FILE).read_text(encoding="utf-8")


def bundled_workloads() -> list[tuple[str, Traversable]]:
    """Every bundled workload as `(name, file)`, sorted by name (`agent-sim` for `agent-sim.wl`)."""
    return _workloads_in(_data_dir("workloads"), "")


def probe_workloads() -> list[tuple[str, Traversable]]:
    """`wl probe`'s experiments as `(name, file)`, sorted (`probes/capacity`)."""
    return _workloads_in(_data_dir("workloads").joinpath(PROBES), PROBES + "/")


def _workloads_in(folder: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    if not folder.is_dir():
        return []
    found = [(prefix + f.name[: -len(WORKLOAD_SUFFIX)], f) for f in folder.iterdir()
             if f.name.endswith(WORKLOAD_SUFFIX) and f.is_file()]
    return sorted(found, key=lambda item: item[0])


def bundled_workload_path(name: str) -> Traversable | None:
    """The bundled workload called `name` (with or without `.wl`; `probes/NAME` for a probe
    experiment), or None if there is none."""
    stem = name[: -len(WORKLOAD_SUFFIX)] if name.endswith(WORKLOAD_SUFFIX) else name
    if stem.startswith(PROBES + "/"):
        return dict(probe_workloads()).get(stem)
    return dict(bundled_workloads()).get(stem)
