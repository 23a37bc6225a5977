"""Every ```wl example in docs/language.md parses and checks without a single diagnostic, and
plans; the tutorial's dry-run output is what `wl plan` prints."""

from __future__ import annotations

import re

import pytest

from workloadlang.check import check
from workloadlang.diagnostics import WorkloadError, render_text
from workloadlang.parse import parse

try:  # tests/ is on sys.path in pytest's default (prepend) import mode
    from docs_examples import LANGUAGE_DOC, Example, wl_examples
except ImportError:  # tests/ turned into a package
    from tests.docs_examples import LANGUAGE_DOC, Example, wl_examples

EXAMPLES = wl_examples()


@pytest.fixture(autouse=True)
def at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples that replay a trace name it relative to the repository's root."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).parents[2])


def test_the_reference_has_examples_and_a_tutorial_section():
    assert len(EXAMPLES) >= 15
    assert "## Tutorial" in LANGUAGE_DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_example_parses_and_checks_cleanly(example: Example):
    try:
        diags = check(parse(example.text, example.name))
    except WorkloadError as exc:
        diags = exc.diagnostics
    assert diags == [], render_text(diags, {example.name: example.text})


def test_the_reference_names_every_metric_aggregation_and_function():
    from workloadlang.check import AGGREGATIONS, METRICS
    from workloadlang.evaluate import FUNCTIONS

    text = LANGUAGE_DOC.read_text(encoding="utf-8")
    missing = [n for n in [*METRICS, *AGGREGATIONS, *FUNCTIONS] if f"`{n}" not in text]
    assert missing == []



# ---------------------------------------------------------------- planning the examples

PLAN_ENV = {"max_context": 131072}  # for examples that use `$max_context`
DOC_TEXT = LANGUAGE_DOC.read_text(encoding="utf-8")
TUTORIAL_AT = DOC_TEXT.index("\n## Tutorial\n")
_DRY_RUN = re.compile(r"^```text[ \t]*\n\$ wl plan (\S+) --salt (\S+)\n(.*?)^```[ \t]*$",
                      re.MULTILINE | re.DOTALL)


def _line_of(offset: int) -> int:
    return DOC_TEXT.count("\n", 0, offset) + 1


def _plan(example: Example):
    from workloadlang import api

    source = api.Source(name=example.name, text=example.text)
    env = PLAN_ENV if "$max_context" in example.text else None
    return api.make_plan(api.parse_checked(source), source, {}, salt="docs", env=env)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_example_plans(example: Example):
    try:
        plan = _plan(example)
    except WorkloadError as exc:
        pytest.fail(render_text(exc.diagnostics, {example.name: example.text}))
    assert plan.requests, "an example that plans no request"
    assert all(0 <= r.expected_cached < r.prompt_tokens for r in plan.requests)


def test_the_tutorial_writes_a_new_workload_step_by_step():
    from workloadlang.resources import bundled_workloads

    steps = [e for e in EXAMPLES if e.line > _line_of(TUTORIAL_AT)]
    assert len(steps) >= 5
    names = {parse(e.text, e.name).name for e in steps}
    bundled = {parse(p.read_text(encoding="utf-8"), n).name for n, p in bundled_workloads()}
    assert names and not names & bundled


def test_the_tutorial_dry_run_is_what_wl_plan_prints(tmp_path, monkeypatch, capsys):
    """The ```text block `$ wl plan FILE --salt S` shows the output of planning the tutorial's
    last ```wl block before it, saved as FILE."""
    from workloadlang.cli.main import main as wl_main

    (match,) = _DRY_RUN.finditer(DOC_TEXT, TUTORIAL_AT)
    filename, salt, shown = match.groups()
    workload = [e for e in EXAMPLES if e.line < _line_of(match.start())][-1]
    (tmp_path / filename).write_text(workload.text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert wl_main(["plan", filename, "--salt", salt]) == 0
    assert capsys.readouterr().out == shown, "update the tutorial's dry-run block"
