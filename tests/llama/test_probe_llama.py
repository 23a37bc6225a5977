"""`wl probe` on the reference llama-server set-up (`-c 32768 -np 4 --cache-ram 256`, SmolLM2):
the card's slots and per-slot context against `/props` and the server's log, its host prompt
cache (the contexts restored from RAM) against the log's largest count of such prompts held at
once, and the restore speed against the log's own time for loading a prompt from the cache
(docs/probe.md, "An example card: llama-server")."""

from __future__ import annotations

import asyncio
import re
import statistics
from collections.abc import Iterator

import httpx
import pytest

from llama import LlamaServer, llama_server_session
from workloadlang import api
from workloadlang.card import Card
from workloadlang.probe import ProbeOptions, probe

pytestmark = pytest.mark.llama

REFERENCE_ARGS = ["-c", "32768", "-np", "4", "--cache-ram", "256", "-lv", "4"]
KV_BYTES = 2 * 30 * 3 * 64 * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 64, fp16
_STATE = re.compile(r"cache state: (\d+) prompts")
_PROMPT = re.compile(r"- prompt 0x[0-9a-f]+: +(\d+) tokens")
_LOAD = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I srv +load: +- found better prompt.*\n"
                   r"(\d+)\.(\d+)\.(\d+)\.(\d+) I srv +update: +- cache state")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from llama_server_session(tmp_path_factory, REFERENCE_ARGS)


@pytest.fixture(scope="module")
def card(server: LlamaServer) -> Card:
    async def go() -> Card:
        async with api.open_engine(server.base_url) as engine:
            return await probe(engine, ProbeOptions(idle_gaps_s=(1.0,), salt="llama",
                                                    kv_bytes_per_token=KV_BYTES))

    return asyncio.run(go())


def test_slots_and_the_slot_context_are_the_servers(server: LlamaServer, card: Card):
    props = httpx.get(f"{server.root_url}/props", timeout=10).json()
    slots = card.prop("slots")
    assert slots.value["slots"] == props["total_slots"] == 4
    assert slots.value["slot_context"] == props["default_generation_settings"]["n_ctx"] == 8192
    assert "n_slots = 4, n_ctx_slot = 8192" in server.log_text()


def held_at_once(log: str, size: int) -> int:
    """The most prompts of about `size` tokens (a context and its answer, which the saved
    state holds too) the log's prompt cache held at once."""
    best = 0
    for block in log.split("cache state:")[1:]:
        listing = block.split("\n")
        sizes = [int(m.group(1)) for line in listing[1:60] for m in [_PROMPT.search(line)] if m]
        sizes = sizes[:int(_STATE.match("cache state:" + listing[0]).group(1))]
        best = max(best, sum(1 for n in sizes if size - 8 <= n <= size + 40))
    return best


def test_what_it_keeps_is_the_prompt_cache_of_the_log(server: LlamaServer, card: Card):
    """A restore from the RAM prompt cache costs no more than a slot hit by price here, so the
    card sees one tier: what it keeps is what the log's prompt cache held at once (the slots'
    prompts are saved to it too), within the contexts the walk's own reads push out (the
    slots')."""
    kept = card.prop("device_capacity")
    assert kept.status == "known", kept.reason
    context = kept.value["context_tokens"]
    held = held_at_once(server.log_text(), context)
    assert held >= 8
    assert held - 4 <= kept.value["tokens"] / context <= held + 2, (kept.value, held)


def load_ms(log: str) -> list[float]:
    """The log's time from finding a prompt in the cache to its state loaded (ms)."""
    out = []
    for m in _LOAD.finditer(log):
        a = [int(x) for x in m.groups()[:4]]
        b = [int(x) for x in m.groups()[4:]]
        secs = lambda t: t[0] * 60 + t[1] + t[2] / 1e3 + t[3] / 1e6  # noqa: E731
        out.append((secs(b) - secs(a)) * 1e3)
    return out


def test_the_restore_speed_is_the_servers_load_or_a_bound_it_keeps(server: LlamaServer,
                                                                   card: Card):
    """The log's load of a prompt from the RAM cache is faster than what the card says would
    not show by price (or, when the card saw the tier, of the order of its host speed)."""
    speed = card.prop("restore_speed")
    assert speed.status == "known", speed.reason
    loads = load_ms(server.log_text())
    assert loads, "the log shows no prompt loaded from the cache"
    logged = speed.value["tokens"] / (statistics.median(loads) / 1e3)
    host, unseen = speed.value.get("host_tps"), speed.value.get("host_unseen_over_tps")
    if host is not None:
        assert logged / 20 <= host <= logged * 2, (host, logged)
    else:
        assert unseen is not None and logged >= unseen / 2, (unseen, logged)
