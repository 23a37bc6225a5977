"""Hostile `.wl` files through the real `wl check` and `wl plan` (child processes, forked from one
process that has imported `wl` once: `hostile.WlForker`; one test starts the `wl` script itself):
every class of bad input (tests/hostile.py) ends with a diagnostic that has a location and exit
2, or is accepted (exit 0), never a traceback; what is printed is bounded; the peak memory stays
under 500 MB. The cases that scale are about 1 MB here; `python bench/fuzz.py --hostile` runs
them at 10 MB.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hostile
from workloadlang import bounds

SIZE = 1_100_000  # over a line's limit, so both sides of it are exercised
PEAK_MB = 500
CASES = list(hostile.sources(SIZE))


def check_answer(case: hostile.Case, path: Path, run: hostile.Measured, code: str | None) -> None:
    """The property for one command's answer to one case."""
    assert "Traceback" not in run.stderr + run.stdout, run.stderr[-3000:]
    assert run.peak_mb < PEAK_MB, f"{case.name}: {run.peak_mb:.0f} MB"
    if code is None:
        assert run.returncode == 0, run.stderr[-3000:]
        return
    assert run.returncode == 2, (run.returncode, run.stderr[-3000:])
    first = run.stderr.splitlines()[0]
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: error\[{code}\]: ", first), first
    assert len(run.stderr) < 20_000, f"{case.name}: {len(run.stderr)} characters on stderr"


@pytest.fixture(scope="module")
def wl():
    forker = hostile.WlForker()
    yield forker
    forker.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_and_plan_answer_every_hostile_source(tmp_path: Path, case: hostile.Case, wl):
    path = tmp_path / "hostile.wl"
    path.write_bytes(case.data)
    check_answer(case, path, wl.measured("check", str(path)), case.check)
    check_answer(case, path, wl.measured("plan", str(path)), case.plan_code)


def test_every_class_is_covered():
    codes = {c.check for c in CASES} | {c.plan_code for c in CASES}
    assert {"WL101", "WL103", "WL104", "WL108", "WL109", "WL110", "WL111", "WL404", None} <= codes
    # the constructs: draws, texts, forks, sweeps, tool calls, traces
    assert {"WL233", "WL408", "WL409", "WL430"} <= codes
    names = " ".join(c.name for c in CASES)
    assert all(w in names for w in ("gamma", "texts", "fork", "sweep", "tool", "trace"))


def test_a_huge_word_is_not_echoed(tmp_path: Path, wl):
    path = tmp_path / "word.wl"
    path.write_bytes(b"workload w { " + b"x" * 500_000 + b" }")
    run = wl.measured("check", str(path))
    assert run.returncode == 2 and run.stderr.count("x" * 200) == 0, run.stderr[:500]
    assert "xxx…" in run.stderr  # the word is shown clipped


def test_json_diagnostics_of_a_file_that_is_not_utf8(tmp_path: Path, wl):
    import json

    path = tmp_path / "latin.wl"
    path.write_bytes('workload w {\n  doc "café" }'.encode("latin-1"))
    run = wl.measured("check", str(path), "--format", "json")
    [diag] = json.loads(run.stdout)
    assert run.returncode == 2 and diag["code"] == "WL109"
    assert (diag["span"]["line"], diag["span"]["col"]) == (2, 11)


def test_a_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path):
    run = hostile.measured("check", str(tmp_path))  # a directory
    assert run.returncode == 2 and "no file or bundled workload" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_limits_are_far_above_the_bundled_workloads():
    from workloadlang.parse import parser
    from workloadlang.resources import bundled_workloads
    from workloadlang.syntax import parse_tree

    for _, path in bundled_workloads():
        text = path.read_text(encoding="utf-8")
        assert len(list(parser().lex(text))) * 20 < bounds.MAX_TOKENS
        assert bounds.too_deep(parse_tree(text), "x", bounds.MAX_DEPTH // 4) is None


def test_the_token_count_starts_past_as_many_characters_as_tokens(monkeypatch):
    """Each token is at least one character: a text of the limit's length is not lexed a
    second time to count its tokens, and one a character longer, all tokens, is refused."""
    from workloadlang.diagnostics import WorkloadError
    from workloadlang.parse import parse, parser
    from workloadlang.resources import bundled_workloads

    at_limit = "{" * bounds.MAX_TOKENS
    over = at_limit + "{"
    with pytest.raises(WorkloadError) as over_limit:
        parse(over, "f.wl")
    assert [d.code for d in over_limit.value.diagnostics] == ["WL110"]
    assert "more than 50,000 tokens" in over_limit.value.diagnostics[0].message

    def no_second_lex(*args, **kwargs):
        raise AssertionError("lexed to count tokens")

    monkeypatch.setattr(parser(), "lex", no_second_lex)
    with pytest.raises(WorkloadError) as at:
        parse(at_limit, "f.wl")
    assert "WL110" not in {d.code for d in at.value.diagnostics}
    for _, path in bundled_workloads():
        parse(path.read_text(encoding="utf-8"), path.name)
