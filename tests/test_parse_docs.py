"""Every ```wl example in docs/language.md parses and checks without a single diagnostic."""

from __future__ import annotations

import pytest

from workloadlang.check import check
from workloadlang.diagnostics import WorkloadError, render_text
from workloadlang.parse import parse

try:  # tests/ is on sys.path in pytest's default (prepend) import mode
    from docs_examples import LANGUAGE_DOC, Example, wl_examples
except ImportError:  # tests/ turned into a package
    from tests.docs_examples import LANGUAGE_DOC, Example, wl_examples

EXAMPLES = wl_examples()


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
