"""The original tool's two false alarms, on the llama-server set-up they were measured on.

`../shared/reference/cache-pressure-behaviour.md` (top): llama-server with SmolLM2-135M Q4_1,
`-c 32768 -np 4 --cache-ram 256`. There the original called both of agent-sim's finalizes
"degraded" (2 sessions, a 3k main context in 500-token steps, 1.5k sub-agents), and abort-sim's
first run reported 1.2 % reuse (1k context, abort after 50 tokens): the re-prompt came before the
server had processed the disconnect, so it went to another slot. Here, on the same set-up, both
are judged healthy. Without the settle wait the abort race can happen as described; each run's
verdict is then held to the server's own log of which slot the re-prompt went to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from llama import LlamaServer, llama_server_session
from runhelp import records, verdicts, wl_run

pytestmark = pytest.mark.llama

REFERENCE_ARGS = ["-c", "32768", "-np", "4", "--cache-ram", "256"]
# abort-sim's sizes in the reference; each slot holds 32768 / 4 = 8192 tokens, so the prime's
# generation budget must fit that (the default 32768 is refused before sending, WL406)
ABORT = ["--context-tokens", "1k", "--thinking-tokens", "50", "--max-tokens", "4k",
         "--ignore-eos", "true"]
_EVENT = re.compile(r"slot get_availabl: id +(\d+) .*selected slot by (LRU|LCP similarity)"
                    r"|slot launch_slot_: id +(\d+) \| task (\d+)"
                    r"|srv +stop: cancel task, id_task = (\d+)")


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from llama_server_session(tmp_path_factory, REFERENCE_ARGS)


def server_events(log: str) -> list[tuple]:
    """Input: llama-server log text. Output: its slot events in order: ("select", slot, how),
    ("launch", slot, task), ("cancel", task)."""
    out: list[tuple] = []
    for m in _EVENT.finditer(log):
        if m.group(1):
            out.append(("select", int(m.group(1)), m.group(2)))
        elif m.group(3):
            out.append(("launch", int(m.group(3)), int(m.group(4))))
        else:
            out.append(("cancel", int(m.group(5))))
    return out


def after_each_abort(events: list[tuple]) -> list[tuple[bool, str]]:
    """Output: for each cancelled (aborted) task, whether the next task the server launched went
    to the same slot (else the aborted one still held it), and how that slot was selected."""
    out = []
    for i, ev in enumerate(events):
        if ev[0] != "launch" or ("cancel", ev[2]) not in events[i:]:
            continue
        nxt = next(j for j in range(i + 1, len(events)) if events[j][0] == "launch")
        how = next(e[2] for e in reversed(events[:nxt]) if e[0] == "select")
        out.append((events[nxt][1] == ev[1], how))
    return out


def test_server_events_parse_this_build_s_log_lines() -> None:
    log = ("I slot get_availabl: id  3 | task -1 | selected slot by LRU, t_last = 8\n"
           "I slot launch_slot_: id  3 | task 784 | processing task, is_child = 0\n"
           "I slot get_availabl: id  1 | task -1 | selected slot by LRU, t_last = 9\n"
           "I slot launch_slot_: id  1 | task 836 | processing task, is_child = 0\n"
           "W srv          stop: cancel task, id_task = 784\n")
    events = server_events(log)
    assert events == [("select", 3, "LRU"), ("launch", 3, 784), ("select", 1, "LRU"),
                      ("launch", 1, 836), ("cancel", 784)]
    assert after_each_abort(events) == [(False, "LRU")]  # another slot: the prime held its own
    events[2:] = [("cancel", 784), ("select", 3, "LCP similarity"), ("launch", 3, 836)]
    assert after_each_abort(events) == [(True, "LCP similarity")]


def test_agent_sim_reference_setup_is_not_called_degraded(tmp_path, reference_server) -> None:
    # the original's sizes. One baseline a session, not the default 3: each is a 2k prefill timed
    # alone (~15 s here). Fewer samples can only make the like-with-like bound more lenient (noise
    # only adds time); the default's strictness on llama-server is held by the one-slot test,
    # test_groundtruth_llama's test_agent_sim_healthy_llama_server_is_ok.
    code, res = wl_run(tmp_path, "agent-sim", "--base-url", reference_server.base_url,
                       "--sessions", "2", "--main-tokens", "3k", "--step-tokens", "500",
                       "--sub-tokens", "1500", "--baselines", "1", "--salt", "reference-agent")
    assert res["engine"]["slots"] == 4 and res["engine"]["prefill_own"] is False
    v = verdicts(res)
    # Four slots and a 256 MiB host cache hold about the whole set-up's contexts (~12k tokens of
    # ~23 KB each): depending on which slot a sub-agent's request takes, the server may really
    # drop one main context. Then `evicted` is the truth, and the server's own usage must say so.
    # What the set-up was measured for is the other call: no kept context called `degraded`.
    assert set(v.values()) <= {"ok", "evicted"}, res["gates"]
    assert "ok" in v.values(), res["gates"]
    fins = {f["session"]: f for f in records(res, "finalize")}
    for session, verdict in v.items():
        f = fins[session]
        if verdict == "evicted":
            assert f["cached_tokens"] < 0.1 * f["expected_cached"], f
        else:
            assert f["hit"] and f["cached_tokens"] >= 0.99 * f["expected_cached"], f
    # four slots share their batches, but what the gates read was timed alone: every gate
    # is judged for every kept session, `speed` included
    ok = {s for s, verdict in v.items() if verdict == "ok"}
    for g in res["gates"]:
        assert g["unknown"] == 0 and g["ranges"] == 0, g
        assert all(r["status"] == "pass" for r in g["results"] if r["scope"] in ok), g
        assert g["status"] == "pass" or ok != set(v), g
    assert all(fins[s]["prefill_contended_s"] == 0 for s in ok)
    assert code == (0 if ok == set(v) else 1)


def test_abort_sim_reference_setup_reuses_after_the_settle_wait(tmp_path,
                                                                reference_server) -> None:
    before = len(reference_server.log_text())
    code, res = wl_run(tmp_path, "abort-sim", "--base-url", reference_server.base_url, *ABORT,
                       "--salt", "reference-abort")
    primes, reprompts = records(res, "prime"), records(res, "reprompt")
    assert [p["streamed_tokens"] for p in primes] == [50, 50], "the abort point is exact"
    assert all(r["reuse"] >= 0.95 for r in reprompts), reprompts
    assert code == 0
    # the server had processed each disconnect before the re-prompt, which found its slot
    seen = after_each_abort(server_events(reference_server.log_text()[before:]))
    assert seen == [(True, "LCP similarity")] * 2, seen


def test_abort_sim_without_the_settle_wait_agrees_with_the_server_s_account(
        tmp_path, reference_server, capsys) -> None:
    """The reference's 1.2 %: with no wait the re-prompt may reach the server before it has
    processed the disconnect; the aborted request still holds its slot and the re-prompt is
    prefilled cold in another. Whether that happens is a race (here 0 to 2 runs of 3), so the
    test holds each run's verdict to the server's own log: a re-prompt that went to its prime's
    slot is a hit, one that went to another a miss. That miss is true (the engine recomputed);
    the settle wait (default 500 ms) is what makes abort-sim measure the reuse it means to, and
    the summary's footer says so for each such miss."""
    before = len(reference_server.log_text())
    code, res = wl_run(tmp_path, "abort-sim", "--base-url", reference_server.base_url, *ABORT,
                       "--settle", "0s", "--runs", "3", "--salt", "reference-abort-race")
    seen = after_each_abort(server_events(reference_server.log_text()[before:]))
    reprompts = records(res, "reprompt")
    assert len(seen) == len(reprompts) == 3, seen
    for (same, how), r in zip(seen, reprompts):
        assert (r["reuse"] >= 0.95 and how == "LCP similarity") if same else r["reuse"] < 0.1, \
            (seen, r)
    assert code == (0 if all(same for same, _ in seen) else 1)
    # each miss came at once after its abort, on a 4-slot engine: the footer says what to try
    misses = sum(not same for same, _ in seen)
    out = capsys.readouterr().out
    assert (f"NOTE: {misses} miss(es) came " in out) if misses else "miss(es) came" not in out
