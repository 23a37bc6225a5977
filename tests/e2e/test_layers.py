"""The house's rules, read from the code's own imports (docs/architecture.md): no import circles;
the results contract at the bottom imports nothing of the runner; no stage imports one above it
(none of the language, the planner, the gates, the report or compare imports `run/`; `run/`
imports no gate, view or command; the wire client imports nothing of the runner; the sharded run
sits between the API and the command line); no module over 600 lines; the executor's core class
under 250; no module named like a standard-library one; no private name taken from another
module, no mixins without a declared interface; Lark and httpx through their public surface."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workloadlang"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parsed(path: Path) -> ast.Module:
    """Input: a Python file. Output: its syntax tree (the same tree for the same text: the
    checks below only read it, and each parses the whole package)."""
    return parse_text(path.read_text(encoding="utf-8"))


@functools.cache
def parse_text(text: str) -> ast.Module:
    return ast.parse(text)


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Input: a Python file. Output: every node of its syntax tree (`ast.walk`'s order), kept:
    each check below walks the whole package, some several times."""
    return _nodes(parsed(path))


@functools.cache
def _nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(tree))


@functools.cache
def modules() -> dict[str, Path]:
    """Module name -> its file, for the whole package (the same dict each call: read only)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, name: str) -> set[str]:
    """Every module of the package that `path` imports, at its top or in a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    known = modules()
    return {m for m in found if m in known and m != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (the same dict each call: read only)."""
    return {name: imports(path, name) for name, path in modules().items()}


def test_there_is_no_import_circle() -> None:
    edges = graph()
    # a package's __init__ that only hands names on is its face, not a room: an edge from one of
    # its own modules to it is the import system's, not a circle of the code
    seen: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package and its own modules
            if seen.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = 2

    for node in sorted(edges):
        if node not in seen:
            visit(node)
    assert not circles, circles


LOWER = ["workloadlang.ir", "workloadlang.diagnostics", "workloadlang.bounds",
         "workloadlang.evaluate", "workloadlang.kinds", "workloadlang.parse",
         "workloadlang.syntax", "workloadlang.check", "workloadlang.checkexpr",
         "workloadlang.checkparams", "workloadlang.checkparts", "workloadlang.declared",
         "workloadlang.selector", "workloadlang.plan", "workloadlang.results",
         "workloadlang.resultsmodels", "workloadlang.theory", "workloadlang.gates",
         "workloadlang.spans", "workloadlang.verdicts", "workloadlang.noise",
         "workloadlang.compare",
         "workloadlang.report", "workloadlang.console", "workloadlang.enginelog",
         "workloadlang.redact", "workloadlang.stamps", "workloadlang.resources",
         "workloadlang.tracefile", "workloadlang.headline", "workloadlang.sweepresults",
         "workloadlang.latency", "workloadlang.ratesearch",
         "workloadlang.card"]

# the language stage: source -> checked IR, and what it defines for the stages above (selectors)
LANGUAGE = ["workloadlang.ir", "workloadlang.irexpr", "workloadlang.diagnostics",
            "workloadlang.bounds", "workloadlang.evaluate", "workloadlang.kinds",
            "workloadlang.parse", "workloadlang.syntax", "workloadlang.check",
            "workloadlang.checkexpr", "workloadlang.checkparams", "workloadlang.checksessions",
            "workloadlang.checkflow", "workloadlang.checkparts", "workloadlang.declared",
            "workloadlang.selector", "workloadlang.tracefile"]


# the results contract: imports nothing of the package but itself
CONTRACT = ["workloadlang.results", "workloadlang.resultsmodels"]


def under(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(("rooms", "never"), [
    (LOWER, ["workloadlang.run", "workloadlang.wire", "workloadlang.cli", "workloadlang.api",
             "workloadlang.sim"]),
    (CONTRACT, ["workloadlang"]),
    (["workloadlang.run"], ["workloadlang.gates", "workloadlang.report", "workloadlang.compare",
                            "workloadlang.console", "workloadlang.cli", "workloadlang.api",
                            "workloadlang.parse", "workloadlang.check"]),
    (["workloadlang.wire"], ["workloadlang.run", "workloadlang.plan", "workloadlang.results",
                             "workloadlang.api", "workloadlang.cli"]),
    (LOWER + ["workloadlang.run", "workloadlang.wire", "workloadlang.api", "workloadlang.sim"],
     ["workloadlang.scale"]),
    (["workloadlang.scale"], ["workloadlang.cli", "workloadlang.gates", "workloadlang.report",
                              "workloadlang.compare", "workloadlang.console"]),
    (LOWER + ["workloadlang.run", "workloadlang.wire", "workloadlang.api", "workloadlang.sim",
              "workloadlang.scale"], ["workloadlang.probe"]),
    (["workloadlang.probe"], ["workloadlang.cli", "workloadlang.run", "workloadlang.wire",
                              "workloadlang.sim", "workloadlang.gates", "workloadlang.report",
                              "workloadlang.compare", "workloadlang.console"]),
    (LANGUAGE, ["workloadlang.plan", "workloadlang.gates", "workloadlang.theory"]),
], ids=["stages below run", "results", "run", "wire", "below the sharded run", "sharded run",
        "below the probe", "probe", "language below plan"])
def test_no_stage_imports_one_above_it(rooms: list[str], never: list[str]) -> None:
    allowed = {"workloadlang", *CONTRACT} if rooms == CONTRACT else set()
    backwards = sorted(f"{a} -> {b}" for a, deps in graph().items() if under(a, rooms)
                       for b in deps if under(b, never) and not under(b, rooms)
                       and b not in allowed)
    assert not backwards, backwards


def test_no_module_is_over_600_lines() -> None:
    long = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in modules().items()}
    assert not {n: k for n, k in long.items() if k > 600}


def test_the_executors_core_class_is_under_250_lines() -> None:
    tree = ast.parse((PACKAGE / "run" / "executor.py").read_text(encoding="utf-8"))
    core = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Executor")
    assert core.end_lineno - core.lineno + 1 < 250


def test_no_module_is_named_like_a_standard_library_module() -> None:
    stdlib = getattr(sys, "stdlib_module_names", None)
    if stdlib is None:  # Python 3.10 has it; older ones are not supported
        pytest.skip("no sys.stdlib_module_names")
    clash = [n for n in modules() if n.rpartition(".")[2] in stdlib]
    assert not clash, clash


def test_no_private_name_of_httpx_or_httpcore_is_used() -> None:
    """The wire client and the runner reach httpx through its public API only: no `httpx._x`,
    no private attribute of a client or transport (`client._transport_for_url`)."""
    found = []
    for name, path in modules().items():
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in \
                    ("httpx", "httpcore"):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") or "._" in (node.module or "")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("httpx", "httpcore", "client",
                                                              "http"):
                    found.append(f"{name}: {base.id}.{node.attr}")
    assert not found, found


def private_reach(path: Path, name: str) -> list[str]:
    """Each private name (`_x`, not a dunder) that the module `name` at `path` takes from
    another module of the package: imported (`from workloadlang.m import _x`), or read off a
    module it imported (`m._x`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = modules()
    private = lambda n: n.startswith("_") and not n.startswith("__")  # noqa: E731
    found: list[str] = []
    aliases: dict[str, str] = {}  # a local name -> the package module it is
    for node in nodes(path):
        if isinstance(node, ast.Import):
            aliases.update({(a.asname or a.name): a.name for a in node.names
                            if a.asname and a.name in known})
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base not in known:
                continue
            found += [f"{name}: from {base} import {a.name}" for a in node.names
                      if private(a.name)]
            aliases.update({(a.asname or a.name): f"{base}.{a.name}" for a in node.names
                            if f"{base}.{a.name}" in known})
    for node in nodes(path):
        if isinstance(node, ast.Attribute) and private(node.attr) and \
                isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_takes_a_private_name_of_another() -> None:
    """A name shared between modules is public: no module of the package imports a `_name`
    from another, or reads one off a module it imported."""
    found = [f for name, path in modules().items() for f in private_reach(path, name)]
    assert not found, found


def test_the_private_name_check_sees_what_it_forbids(tmp_path: Path) -> None:
    """The check above finds an import of a private name, relative or absolute, and a private
    name read off an imported module."""
    path = tmp_path / "m.py"
    path.write_text("from workloadlang.checkparams import sweep_text, _hidden\n"
                    "from . import results as r\nfrom .parse import _Lower\n"
                    "import workloadlang.syntax as syn\n"
                    "x = r._results_of(1) + syn._WORD\ny = r.read_results\n", encoding="utf-8")
    assert sorted(private_reach(path, "workloadlang.m")) == sorted([
        "workloadlang.m: from workloadlang.checkparams import _hidden",
        "workloadlang.m: from workloadlang.parse import _Lower",
        "workloadlang.m: workloadlang.results._results_of",
        "workloadlang.m: workloadlang.syntax._WORD"])


def test_a_class_of_several_bases_declares_its_interface() -> None:
    """No mixins without a declared interface: a class with more than one base is a
    `typing.Protocol` (parts of a whole are collaborators given what they need, as the
    checker's are a `checkexpr.Checker`)."""
    mixed = []
    for name, path in modules().items():
        for node in nodes(path):
            if isinstance(node, ast.ClassDef) and len(node.bases) > 1 and not any(
                    ast.unparse(b).rpartition(".")[2] == "Protocol" for b in node.bases):
                mixed.append(f"{name}.{node.name}({', '.join(map(ast.unparse, node.bases))})")
    assert not mixed, mixed


# the modules of Lark that its API reference documents (docs/classes.rst: `lark.Lark`,
# `lark.Token`, `lark.Tree`, `lark.exceptions`, the interactive parser's module)
LARK_DOCUMENTED = {"lark", "lark.exceptions", "lark.parsers.lalr_interactive_parser"}
# what Lark keeps inside its parser: the frontend, its lexer, the LALR state and table
LARK_INTERNALS = {"parser", "lexer", "lexer_conf", "lexer_thread", "lexer_state", "parser_state",
                  "parse_conf", "parse_table", "state_stack", "value_stack", "states",
                  "callbacks", "position", "grammar", "rules", "options"}


def lark_uses(tree: ast.AST) -> list[str]:
    """What a module's `tree` takes from Lark beyond its documented surface: an import from an
    undocumented module or of a private name, a private attribute (`x._y`) or one of the parser's
    internals (`LARK_INTERNALS`), read or assigned."""
    found = []
    for node in _nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for a in node.names:
                where = module or a.name
                if where.split(".")[0] == "lark" and (where not in LARK_DOCUMENTED
                                                      or a.name.startswith("_")):
                    found.append(f"import {where}" + (f": {a.name}" if module else ""))
        elif isinstance(node, ast.Attribute) and (node.attr in LARK_INTERNALS or (
                node.attr.startswith("_") and not node.attr.startswith("__"))):
            found.append(f".{node.attr} (line {node.lineno})")
    return found


def test_lark_is_used_through_its_documented_surface() -> None:
    """The modules that import Lark (the parser) reach it through its documented API: the
    `Lark` object's `parse_interactive`, `lex` and terminals, the interactive parser's
    `iter_parse`, `feed_token`, `choices`, `accepts`, `copy`, `resume_parse`, tokens and
    exceptions; never its parser's lexer, state stack or parse table (docs/architecture.md)."""
    found = {}
    for name, path in modules().items():
        tree = parsed(path)
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) and "lark" in
               {(getattr(n, "module", None) or a.name).split(".")[0] for a in n.names}
               for n in _nodes(tree)):
            found[name] = lark_uses(tree)
    assert "workloadlang.syntax" in found
    assert not any(found.values()), found


def test_the_lark_check_sees_what_it_forbids() -> None:
    """The check above finds each kind of reach past Lark's surface."""
    reach = ("from lark.parsers.lalr_analysis import Shift\nfrom lark.lexer import Lexer\n"
             "lark.parser.lexer = wrapped\nstack = cursor.parser_state.state_stack\n"
             "terms = lark._terminals_dict\n")
    assert sorted(lark_uses(ast.parse(reach))) == sorted([
        "import lark.parsers.lalr_analysis: Shift", "import lark.lexer: Lexer",
        ".lexer (line 3)", ".parser (line 3)", ".state_stack (line 4)",
        ".parser_state (line 4)", "._terminals_dict (line 5)"])


def test_exit_codes_are_one_enum_in_the_results_contract() -> None:
    """`results.ExitCode` is the one place exit codes are declared: no other enum of them and
    no `EXIT_*` constant anywhere in the package."""
    declared = []
    for name, path in modules().items():
        for node in nodes(path):
            if isinstance(node, ast.ClassDef) and "exit" in node.name.lower():
                declared.append(f"{name}.{node.name}")
            elif isinstance(node, ast.Assign):
                declared += [f"{name}.{t.id}" for t in node.targets
                             if isinstance(t, ast.Name) and t.id.upper().startswith("EXIT_")]
    assert declared == ["workloadlang.results.ExitCode"]


def test_the_command_line_runs_through_the_api() -> None:
    """`cli/` reaches the runner only through `workloadlang.api` (`open_engine`,
    `run_workload`): it imports nothing of `run/` or `wire/`."""
    reached = sorted(f"{a} -> {b}" for a, deps in graph().items() if under(a, ["workloadlang.cli"])
                     for b in deps if under(b, ["workloadlang.run", "workloadlang.wire"]))
    assert not reached, reached


def package_bindings(path: Path, package: str) -> dict[str, str]:
    """The names a package's `__init__.py` binds at its top, each with what it binds: `module`
    for one of its own modules (`from workloadlang.cli import main`), else `object`."""
    bound: dict[str, str] = {}
    for node in parsed(path).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for a in node.names:
                bound[a.asname or a.name] = "module" if base == package else "object"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = "object"
        elif isinstance(node, ast.Assign):
            bound.update({t.id: "object" for t in node.targets if isinstance(t, ast.Name)})
    return bound


def test_no_package_hides_one_of_its_modules_behind_a_name() -> None:
    """`workloadlang.cli.main` is the module, not a function of the same name bound by the
    package: a package's `__init__` binds no name of one of its modules to something else."""
    hidden = []
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        own = {p.stem for p in path.parent.glob("*.py")} | {
            p.name for p in path.parent.iterdir() if (p / "__init__.py").is_file()}
        hidden += [f"{name}.{n}" for n, what in package_bindings(path, name).items()
                   if n in own and what != "module"]
    assert not hidden, hidden


def test_no_two_modules_share_a_name() -> None:
    """Every module of the package has a name of its own (`sweeppoints.py`, `sweepresults.py`,
    `sweeppage.py`, not three `sweep.py`): a name in a traceback, an import or the
    architecture's table says which one (a package's `__init__.py` and `__main__.py` aside)."""
    seen: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(name)
    assert not {n: m for n, m in seen.items() if len(m) > 1}


def test_a_fresh_salt_is_drawn_in_one_place() -> None:
    """One `fresh_salt` in the package (`plan.draws`), used by the API and the runner alike."""
    defined = [f"{name}.{node.name}" for name, path in modules().items()
               for node in nodes(path)
               if isinstance(node, ast.FunctionDef) and node.name == "fresh_salt"]
    assert defined == ["workloadlang.plan.draws.fresh_salt"]


def argparse_uses(path: Path) -> list[str]:
    """Where a module imports argparse, names its `Namespace`, or reads `getattr(args, ...)`."""
    found = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == "argparse"]
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append("from argparse import ...")
        elif isinstance(node, ast.Name) and node.id == "Namespace" or \
                isinstance(node, ast.Attribute) and node.attr == "Namespace":
            found.append(f"Namespace (line {node.lineno})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "getattr" and node.args and \
                isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
            found.append(f"getattr(args, ...) (line {node.lineno})")
    return found


def test_the_command_line_stays_in_cli() -> None:
    """argparse and its `Namespace` stay in `cli/`: every command turns its arguments into a
    typed request there (`cli/requests.py`, `compare.CompareRequest`, `report.ReportRequest`,
    `scale.workers.Workers`, `api.PlanOptions`), and what it calls takes those. The
    simulator's own command line (`sim/`) and `__main__.py` entry points aside; nowhere does a
    function read `getattr(args, ...)`."""
    leaks = []
    for name, path in modules().items():
        uses = argparse_uses(path)
        if under(name, ["workloadlang.cli", "workloadlang.sim"]) or path.name == "__main__.py":
            uses = [u for u in uses if u.startswith("getattr")]
        leaks += [f"{name}: {u}" for u in uses]
    assert not leaks, leaks


def module_names_bound(tree: ast.Module, name: str, path: Path) -> set[str]:
    """The names a module binds at its top to modules of the package (`from workloadlang
    import ir`, `from workloadlang.plan import limits`, `import workloadlang.x as x`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known, bound = modules(), set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            bound |= {a.asname or a.name for a in node.names if f"{base}.{a.name}" in known}
        elif isinstance(node, ast.Import):
            bound |= {a.asname for a in node.names if a.asname and a.name in known}
    return bound


def test_no_parameter_shadows_a_module() -> None:
    """No function takes a parameter named like a module its module imports (a `limits`
    parameter next to `from workloadlang import limits` hides the module in that function)."""
    shadows = []
    for name, path in modules().items():
        tree = parsed(path)
        bound = module_names_bound(tree, name, path)
        for node in _nodes(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                shadows += [f"{name}:{node.lineno} {p.arg}" for p in params
                            if p is not None and p.arg in bound]
    assert not shadows, shadows
