"""The results file's schema: generated from the models, published in docs/, versioned; a file
of the previous version (`tests/data/results-v1/`, written by the code before the schema was
typed) still reads in `wl report` and `wl compare`, and one of another version is refused.

Regenerate the published schema with WL_UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workloadlang.cli.main import main
from workloadlang.report import sample
from workloadlang.results import (
    PREVIOUS_SCHEMAS,
    SCHEMA,
    ResultsFileError,
    read_results,
    results_schema,
)
from workloadlang.resultsmodels import ClientHealth, MetricsSummary

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "results-schema.json"
V1 = ROOT / "tests" / "data" / "results-v1"
UPDATE = os.environ.get("WL_UPDATE_GOLDEN") == "1"


def test_the_published_schema_is_the_one_the_models_give() -> None:
    text = json.dumps(results_schema(), indent=2, ensure_ascii=False) + "\n"
    if UPDATE:
        PUBLISHED.write_text(text, encoding="utf-8")
    assert PUBLISHED.read_text(encoding="utf-8") == text, \
        "run with WL_UPDATE_GOLDEN=1 to accept, and read the diff"


def test_the_schema_names_its_version_and_types_every_part() -> None:
    schema = results_schema()
    assert schema["$id"] == SCHEMA == "workloadlang.results/2"
    assert schema["properties"]["schema"]["const"] == SCHEMA
    assert "schema_" not in schema["properties"]
    assert "schema" in schema["required"]
    for part, model in (("engine", "EngineSummary"), ("calibration", "Calibration"),
                        ("metrics", "MetricsSummary"), ("client", "ClientHealth")):
        assert schema["properties"][part] == {"$ref": f"#/$defs/{model}"}
    # no part is an open object: every model refuses keys it does not name
    defs = schema["$defs"]
    assert all(d.get("additionalProperties") is False
               for name, d in defs.items() if name not in ("Concurrency", "Goodput", "Performance",
                                                           "Slo", "Spread", "ErrorDetail",
                                                           "ScopeResult", "GateResult"))


@pytest.mark.parametrize("name", ["needle-a.json", "needle-b.json"])
def test_a_previous_version_file_reads_as_this_version_and_writes_back_the_same(
        name: str) -> None:
    path = V1 / name
    raw = path.read_text(encoding="utf-8")
    assert json.loads(raw)["schema"] in PREVIOUS_SCHEMAS
    res = read_results(path)
    assert res.schema_ == SCHEMA
    assert res.engine.sim and res.calibration.sizing and res.metrics.snapshots
    # written again: the same bytes but for the version (absent figures stay absent)
    assert res.to_json() == raw.replace(json.loads(raw)["schema"], SCHEMA, 1)


def test_wl_report_and_wl_compare_read_previous_version_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert main(["report", str(V1 / "needle-a.json"), str(V1 / "needle-b.json"),
                 "-o", str(html)]) == 0
    assert "needle" in html.read_text(encoding="utf-8")
    capsys.readouterr()
    code = main(["compare", str(V1 / "needle-a.json"), str(V1 / "needle-b.json")])
    out, err = capsys.readouterr()
    assert code in (0, 1) and "gates" in out and "Traceback" not in err


def test_a_file_of_another_version_is_refused_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((V1 / "needle-a.json").read_text(encoding="utf-8"))
    data["schema"] = "workloadlang.results/3"
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ResultsFileError, match="version 'workloadlang.results/3'"):
        read_results(newer)
    capsys.readouterr()
    assert main(["report", str(newer), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "workloadlang.results/3" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["compare", str(newer), str(V1 / "needle-a.json")]) == 2
    err = capsys.readouterr().err
    assert "workloadlang.results/3" in err and "Traceback" not in err


def test_a_key_the_schema_does_not_name_is_refused(tmp_path: Path) -> None:
    data = json.loads(sample.retention().to_json())
    data["client"]["made_up_ms"] = 1.0
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ResultsFileError, match=r"client\.made_up_ms"):
        read_results(odd)


def test_a_figure_not_measured_stays_absent() -> None:
    """A sparse part writes only what it was given: a run without counters has no hit ratio,
    and reading it back does not add one."""
    m = MetricsSummary.model_validate({"snapshots": [], "records_prompt_tokens": 5,
                                       "records_cached_tokens": 0})
    assert "engine_hit_ratio" not in m.model_dump() and m.engine_hit_ratio is None
    c = ClientHealth.model_validate({"cpu_s": 0.5, "loop_lag_max_at_s": None})
    assert c.model_dump() == {"loop_lag_max_at_s": None, "cpu_s": 0.5}
    assert ClientHealth.model_validate(c.model_dump()) == c
