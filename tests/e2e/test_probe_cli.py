"""`wl probe` as a user runs it: a card on the terminal and in `--output`, progress on stderr,
exit codes as `wl run`'s; and bad input: an unreachable engine (exit 3, a card of unknowns), an
engine that reports no cached tokens and whose timings cannot tell a hit from a cold prefill
(unknown, saying why), a capacity beyond `--budget-tokens` (unknown, exit 4), bad flags (exit
2). No traceback, and the API key in no output."""

from __future__ import annotations

import socket

import pytest

from workloadlang.card import read_card
from workloadlang.cli.main import main as wl_main

pytestmark = pytest.mark.paired  # it reads time, light on the CPU: beside a `paired` test at most

SMALL = ["--sim", "--sim-max-model-len", "8192", "--sim-device-tokens", "12288",
         "--sim-prefill-us-per-token", "4", "--sim-prefill-ctx-scale", "2048", "--idle", "0.2s"]


def probe(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = wl_main(["probe", *args])
    except SystemExit as e:  # argparse's own refusal of a flag's value
        code = int(e.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def test_a_card_of_the_simulator(tmp_path, capsys):
    path = tmp_path / "card.json"
    key = "sk-probe-secret-0123456789"
    code, out, err = probe(capsys, *SMALL, "--output", str(path), "--report",
                           str(tmp_path / "card.html"), "--api-key", key,
                           "--kv-shape", "30,3,64")
    assert code == 0, err
    card = read_card(path)
    assert card.prop("granularity").value["block_tokens"] == 16
    device = card.prop("device_capacity")
    assert device.status == "known" and device.value["tokens"] == 12288
    assert card.prop("eviction_order").value == {"policy": "lru", "evicts_first": "tail"}
    assert card.options["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert "device capacity  12,288 tokens" in out and "probe: capacity" in err
    assert key not in out + err + path.read_text() + (tmp_path / "card.html").read_text()
    assert {e.workload for e in card.experiments} == {"probes/granularity", "probes/idle",
                                                      "probes/capacity", "probes/abort"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_engine_gives_a_card_of_unknowns_and_exit_3(tmp_path, capsys):
    path = tmp_path / "card.json"
    code, out, err = probe(capsys, f"http://127.0.0.1:{free_port()}/v1", "--output", str(path))
    assert code == 3 and "endpoint error" in err
    card = read_card(path)
    assert card.exit_code == 3
    assert all(p.status == "unknown" and "could not be used" in p.reason
               for p in card.properties.values())


def test_no_cached_tokens_and_timings_that_cannot_tell_is_unknown_with_the_reason(capsys):
    code, out, err = probe(capsys, *SMALL, "--sim-fault", "no_cached_report", "--sim-fault",
                           "no_timings", "--sim-prefill-us-per-token", "0")
    assert code == 0, err
    assert "granularity      unknown: the engine reports no cached tokens" in out
    assert "device capacity  unknown: the engine reports no cached tokens" in out


def test_a_capacity_beyond_the_budget_is_unknown_and_exit_4(capsys):
    code, out, err = probe(capsys, "--sim", "--idle", "0.2s", "--budget-tokens", "60k")
    assert code == 4, out + err
    assert "device capacity  unknown: every context was still served whole" in out
    assert "--budget-tokens stopped the probe there" in out


@pytest.mark.parametrize("args", [["--sim", "--idle", "0s"], [], ["ftp://x"],
                                  ["--sim", "--kv-shape", "1,2"],
                                  ["--sim", "--sim-eviction", "random"]])
def test_bad_flags_exit_2(capsys, args):
    code, out, err = probe(capsys, *args)
    assert code == 2 and err.strip()
