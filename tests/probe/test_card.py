"""The cache card: its JSON (schema `workloadlang.card/1`) read back, a file that is no card
refused with one line, the terminal text (every property; unknown ones with their reason; the
cost beside a naive bisection's), the comparison of two cards, and the card's HTML page."""

from __future__ import annotations

import re

import pytest

from workloadlang.card import Card, CardFileError, Cost, Experiment, Property, read_card
from workloadlang.card.cardtext import render_card, render_compare
from workloadlang.cli.main import main as wl_main
from workloadlang.report.cardpage import card_page


def card(device: int = 262144, host_tps: float = 50e3, policy: str = "lru") -> Card:
    return Card(
        engine={"base_url": "http://127.0.0.1:8000/v1", "model": "m", "engine": "vllm"},
        properties={
            "device_capacity": Property(status="known", summary=f"{device:,} tokens",
                                        value={"tokens": device, "context_tokens": 8199,
                                               "curve": [{"filled": 8199, "kept": 8192,
                                                          "tier": "device"}]},
                                        interval=[device, device]),
            "restore_speed": Property(status="known", summary="cold 470k tokens/s",
                                      value={"cold_tps": 470e3, "device_tps": 1.6e7,
                                             "host_tps": host_tps}),
            "eviction_order": Property(status="known", summary=policy.upper(),
                                       value={"policy": policy, "evicts_first": "tail"}),
            "idle_lifetime": Property(status="not_measured", reason="the time budget ran out"),
            "integrity": Property(status="unknown", reason="no context was answered again"),
        },
        experiments=[Experiment(name="capacity", workload="probes/capacity", salt="s-c",
                                params={"context_tokens": "8192"}, requests=10)],
        cost=Cost(requests=10, prompt_tokens=10_000, prefilled_tokens=5_000, wall_s=1.5,
                  naive_bisection_tokens=90_000), exit_code=0)


def test_the_card_reads_back_from_its_json(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(card().to_json())
    back = read_card(path)
    assert back == card() and '"schema": "workloadlang.card/1"' in path.read_text()


@pytest.mark.parametrize("text", ["", "not json", '{"schema": "workloadlang.results/1"}',
                                  '{"schema": "workloadlang.card/1", "properties": 3}'])
def test_a_file_that_is_no_card_is_refused_with_one_line(tmp_path, text):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(CardFileError) as e:
        read_card(path)
    assert "\n" not in str(e.value)


def test_the_terminal_card_has_every_property_and_says_why_one_is_unknown():
    text = render_card(card())
    assert "device capacity  262,144 tokens" in text
    assert "idle lifetime    not measured: the time budget ran out" in text
    assert "integrity        unknown: no context was answered again" in text
    assert "abort retention  not measured: not in this card" in text
    assert re.search(r"naive bisection one context at a time: 90,000 prefilled", text)


def test_two_cards_compare_by_ratio_and_percentage():
    text = render_compare(card(), card(device=230000, host_tps=155e3, policy="fifo"))
    assert "device capacity: 262,144 -> 230,000 (-12.3%)" in text
    assert "host restore: 50.0k tokens/s -> 155.0k tokens/s (3.1x faster)" in text
    assert "eviction order: lru -> fifo" in text
    assert "no property changed" in render_compare(card(), card())


def test_wl_probe_compare_reads_two_files_and_refuses_a_bad_one(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(card().to_json())
    b.write_text(card(device=131072).to_json())
    assert wl_main(["probe", "--compare", str(a), str(b)]) == 0
    assert "(-50.0%)" in capsys.readouterr().out
    b.write_text("{")
    assert wl_main(["probe", "--compare", str(a), str(b)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_the_card_page_is_self_contained(tmp_path, capsys):
    page = card_page(card())
    assert "default-src &#39;none&#39;" in page and "<script" not in page
    assert page.count("<svg") == 1 and "wl run probes/capacity --salt s-c" in page
    path = tmp_path / "card.json"
    path.write_text(card().to_json())
    assert wl_main(["report", str(path), "-o", str(tmp_path / "card.html")]) == 0
    assert "Cache card" in (tmp_path / "card.html").read_text()
