"""bench.llama_prefill's smoke run: two names for the one build, a round of two small sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import llama_prefill

pytestmark = pytest.mark.llama


def test_llama_prefill_runs_small(tmp_path: Path, llama_server) -> None:
    out = tmp_path / "prefill.json"
    binary = str(llama_server.binary)
    assert llama_prefill.main(["--server", f"a={binary}", "--server", f"b={binary} -ub 256",
                               "--model", str(llama_server.model), "--sizes", "20,200",
                               "--rounds", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["server"] for r in rows] == ["a", "b", "a", "b"]
    small, large = rows[0]["prompt_tokens"], rows[2]["prompt_tokens"]
    # the tokens the server evaluated: a prompt found in its cache would count one
    assert 20 < small < large < 400
    assert all(0 < r["low"] <= r["median"] <= r["high"] for r in rows)
