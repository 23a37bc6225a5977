"""Traces: reading Mooncake and workloadlang trace files, planning them, and replaying them.

Input: the committed slice of the Mooncake conversation trace (tests/data/mooncake, 1,000
records) and small trace files written here. Output checked: the records read and selected, the
diagnostics for bad files (exit 2, bounded memory), the planned requests (prompt sizes, shared
prefixes against an independent count, send times, scaling), the plan hash following the
file's content, the LRU model against the simulator's own cache code, and the replay on the
simulator: at concurrency 1 the measured hit rate within half a point of the plan's LRU figure.
"""

from __future__ import annotations

import json
import math
import random
import tracemalloc
from pathlib import Path

import pytest

from runhelp import wl_run
from workloadlang import api, tracefile
from workloadlang.cli.main import main as wl_main
from workloadlang.plan.assemble import finish_requests  # noqa: F401  (the pass under test)
from workloadlang.plan.lru import Lru, generated_run, order, path_runs
from workloadlang.plan.model import CacheModel, Plan
from workloadlang.sim.cache import PrefixCache

DATA = Path(__file__).parents[1] / "data" / "mooncake"
SLICE = DATA / "conversation_1000.jsonl"
TEMPLATE = 7  # planned tokens a trace prompt adds: user header 3, end 1, generation prompt 3


def load(path: Path, **sel) -> tracefile.Trace:
    return tracefile.load(path, tracefile.Selection(**sel), max_records=50_000,
                          max_tokens=10_000_000)


def plan_trace(path: Path, cache: CacheModel | None = None, **params: str) -> Plan:
    source = api.load("mooncake")
    return api.make_plan(api.parse_checked(source), source, {"trace": str(path), **params},
                         salt="trace", cache=cache)


def write(tmp_path: Path, lines: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


GENERIC_HEAD = {"trace": "workloadlang", "version": 1, "block_tokens": 100}


# ---------------------------------------------------------------- reading


def test_the_mooncake_slice_reads_as_it_is():
    t = load(SLICE)
    raw = [json.loads(line) for line in SLICE.read_text().splitlines()]
    assert t.format == "mooncake" and t.block_tokens == 512 and t.records_total == 1000
    assert len(t.records) == t.sessions == 1000
    first, last = t.records[0], t.records[-1]
    assert (first.input_tokens, first.output_tokens, first.blocks) == \
        (raw[0]["input_length"], raw[0]["output_length"], tuple(raw[0]["hash_ids"]))
    assert last.t == pytest.approx((raw[-1]["timestamp"] - raw[0]["timestamp"]) / 1000)
    import hashlib
    assert t.sha256 == hashlib.sha256(SLICE.read_bytes()).hexdigest()


def test_offset_limit_and_sample_select_records():
    t = load(SLICE, offset=100, limit=50)
    assert [r.number for r in t.records] == list(range(100, 150))
    assert t.records[0].t == 0 and t.records_total == 1000  # times from the first taken
    half = load(SLICE, sample=0.5)
    assert 400 < len(half.records) < 600
    assert [r.number for r in load(SLICE, sample=0.5).records] == [r.number for r in half.records]


def test_the_generic_format_has_sessions_in_send_order(tmp_path: Path):
    p = write(tmp_path, [GENERIC_HEAD,
                         {"t": 2.0, "session": "b", "input_tokens": 150, "output_tokens": 5,
                          "blocks": [1, 2]},
                         {"t": 0.5, "session": "a", "input_tokens": 100, "output_tokens": 5,
                          "blocks": [1]},
                         {"t": 3.0, "session": "a", "input_tokens": 250, "output_tokens": 5},
                         "", {"t": 1.0, "input_tokens": 10, "output_tokens": 1}])
    t = load(p)
    assert t.format == "workloadlang" and t.block_tokens == 100 and t.sessions == 3
    assert [(r.t, r.session, r.number) for r in t.records] == \
        [(0.0, 0, 1), (0.5, 1, 3), (1.5, 2, 0), (2.5, 0, 2)]
    assert len(t.records[3].blocks) == 3 and len(set(t.records[3].blocks) & {1, 2}) == 0


BAD = {
    "empty": ([], "the trace file is empty"),
    "not_json": (["{oops"], "1: not a JSON object"),
    "a_list": (["[1, 2]"], "1: not a JSON object"),
    "unknown_kind": ([{"x": 1}], "neither a workloadlang trace header"),
    "version": ([{"trace": "workloadlang", "version": 9}], "unknown workloadlang trace version"),
    "block_count": ([{"timestamp": 0, "input_length": 1025, "output_length": 1,
                      "hash_ids": [1, 2]}], "1: `hash_ids` must list one id per 512-token block"),
    "negative": ([{"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]}],
                 "`timestamp` must be a time of at least 0"),
    "no_output": ([GENERIC_HEAD, {"t": 0, "input_tokens": 10}], "2: `output_tokens` must be"),
    "huge_prompt": ([{"timestamp": 0, "input_length": 10 ** 12, "output_length": 1,
                      "hash_ids": []}], "more than a request may hold"),
    "bad_id": ([GENERIC_HEAD, {"t": 0, "input_tokens": 10, "output_tokens": 1,
                               "blocks": [[1]]}], "a block id must be"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_trace_is_a_diagnostic_with_its_line(tmp_path: Path, capsys, name: str):
    lines, said = BAD[name]
    p = write(tmp_path, lines)
    assert wl_main(["plan", "mooncake", "--trace", str(p)]) == 2
    err = capsys.readouterr().err
    assert "error[WL409]" in err and said in err and "Traceback" not in err, err


def test_a_missing_trace_file_exits_2(capsys, tmp_path: Path):
    assert wl_main(["plan", "mooncake", "--trace", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read the trace file" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_trace_that_is_no_regular_file_is_refused_without_waiting(tmp_path: Path, kind: str):
    """`--trace trace.fifo` blocked `wl plan` forever (the open waits for a writer); a device
    may never end. (A child process, so that a blocked open fails the test by its timeout.)"""
    import os

    from faultserver import run_wl

    path = {"fifo": tmp_path / "trace.fifo", "device": Path("/dev/zero"),
            "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    proc = run_wl("plan", "mooncake", "--trace", str(path), timeout=60)
    what = {"fifo": "a named pipe", "device": "a device", "directory": "a directory"}[kind]
    assert proc.returncode == 2 and "error[WL409]" in proc.stderr, proc.stderr
    assert f"the trace file is {what}" in proc.stderr and "Traceback" not in proc.stderr


def test_a_huge_line_is_refused_without_reading_it_whole(tmp_path: Path):
    p = tmp_path / "big.jsonl"
    with open(p, "w") as f:
        f.write('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [')
        f.write("1, " * 5_000_000 + "1]}\n")
    tracemalloc.start()
    try:
        with pytest.raises(tracefile.TraceError, match="longer than 8 MiB"):
            load(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40_000_000


def test_more_records_than_the_request_limit_are_refused(tmp_path: Path):
    p = write(tmp_path, [{"timestamp": i, "input_length": 10, "output_length": 1,
                          "hash_ids": [i]} for i in range(30)])
    with pytest.raises(tracefile.TraceError, match="more than 20 requests"):
        tracefile.load(p, max_records=20, max_tokens=1000)
    assert len(tracefile.load(p, tracefile.Selection(limit=20), max_records=20,
                          max_tokens=1000).records) == 20


# ---------------------------------------------------------------- planning


def independent_expected(path: Path) -> list[int]:
    """What a perfect cache serves each request of a Mooncake file in file order, counted
    without the planner: the longest run of leading block ids equal to an earlier request's,
    in tokens, plus the user header; all of a prompt seen before is all of it but one token."""
    seen: set[tuple] = set()
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        ids, n = rec["hash_ids"], rec["input_length"]
        k = next(k for k in range(len(ids), -1, -1) if k == 0 or tuple(ids[:k]) in seen)
        prompt = n + TEMPLATE
        shared = 3 + min(n, 512 * k) if k else 0
        out.append(prompt - 1 if k == len(ids) else shared)
        seen.update(tuple(ids[:j]) for j in range(1, len(ids) + 1))
    return out


def test_the_plan_of_the_slice_expects_what_an_independent_count_does():
    plan = plan_trace(SLICE, max_concurrency="1")
    assert len(plan.requests) == 1000 and plan.traces[0].selected == 1000
    raw = [json.loads(line) for line in SLICE.read_text().splitlines()]
    assert [r.prompt_tokens for r in plan.requests] == [x["input_length"] + TEMPLATE for x in raw]
    assert [r.max_tokens for r in plan.requests] == [x["output_length"] for x in raw]
    assert [r.expected_cached for r in plan.requests] == independent_expected(SLICE)
    assert all(r.send_at == (x["timestamp"] - raw[0]["timestamp"]) / 1000
               for r, x in zip(plan.requests, raw))
    assert any("exact at concurrency 1" in a for a in plan.assumptions)


def test_equal_block_ids_are_byte_identical_text():
    from workloadlang.plan.realise import Realiser
    plan = plan_trace(SLICE, limit="3")
    texts = [Realiser(plan).messages(r, {})[0]["content"] for r in plan.requests]
    # records 0..2 share their first block (id 0) only
    words = [t.split() for t in texts]
    assert words[0][:512] == words[1][:512] == words[2][:512]
    assert words[0][512:520] != words[1][512:520]
    assert [len(w) for w in words] == [r.prompt_tokens - TEMPLATE for r in plan.requests]


def test_time_scale_block_tokens_and_max_tokens_shape_the_requests():
    plan = plan_trace(SLICE, limit="20", time_scale="0.5", block_tokens="16", max_tokens="8")
    raw = [json.loads(line) for line in SLICE.read_text().splitlines()[:20]]
    for r, x in zip(plan.requests, raw):
        full = len(x["hash_ids"]) - 1
        cut = math.ceil((x["input_length"] - 512 * full) * 16 / 512)
        assert r.prompt_tokens == 16 * full + cut + TEMPLATE
        assert r.max_tokens == min(8, x["output_length"])
        assert r.send_at == pytest.approx((x["timestamp"] - raw[0]["timestamp"]) / 2000)
    fast = plan_trace(SLICE, limit="20", time_scale="0")
    assert {r.send_at for r in fast.requests} == {None}  # no time: each as soon as it can go


def test_the_plan_hash_follows_the_traces_content_not_its_path(tmp_path: Path):
    a = tmp_path / "a.jsonl"
    a.write_bytes(SLICE.read_bytes())
    b = tmp_path / "b.jsonl"
    b.write_bytes(SLICE.read_bytes())
    assert plan_trace(a, limit="50").plan_hash == plan_trace(b, limit="50").plan_hash
    lines = SLICE.read_text().splitlines()
    lines[900] = lines[900].replace('"output_length": ', '"output_length": 1')
    b.write_text("\n".join(lines) + "\n")  # a record the plan does not take
    assert plan_trace(a, limit="50").plan_hash != plan_trace(b, limit="50").plan_hash


def test_wl_plan_shows_send_times_and_the_trace(capsys):
    assert wl_main(["plan", "mooncake", "--trace", str(SLICE), "--limit", "5", "--salt", "s",
                     "--cache-tokens", "1M", "--cache-block", "512"]) == 0
    out = capsys.readouterr().out
    assert "send at" in out and "LRU cached" in out and "(mooncake, 1,000 records, 5 taken" in out


# ---------------------------------------------------------------- the LRU model is the simulator's


def block_lists(runs: list, gen) -> tuple[list, list]:
    """The runs as block identities, for the simulator's cache."""
    expand = lambda rs: [(key, j) for key, k in rs for j in range(k)]  # noqa: E731
    return expand(runs), expand([gen] if gen else [])


def simulator_replay(plan_streams, trie, prompts, generated, caps, block, tokens) -> list[int]:
    """The simulator's own cache (`sim/cache.py`), one request at a time as the simulator's
    engine drives it: match, insert the prompt's blocks, insert the generated ones, release."""
    cache = PrefixCache(block, tokens)
    out = [0] * len(plan_streams)
    for i in order(plan_streams):
        s = plan_streams[i]
        prompt_blocks, gen_blocks = block_lists(
            path_runs(s.prompt, trie.root, block),
            generated_run(i, s, prompts[i], generated[i], block))
        m = cache.match(prompt_blocks)
        out[i] = min(m.blocks * block, (prompts[i] - 1) // block * block, caps[i])
        rest = prompt_blocks[len(m.pinned):]
        inserted = cache.insert(rest) if rest else []
        pinned = m.pinned + inserted
        if len(inserted) == len(rest):
            pinned += cache.insert(gen_blocks)
        cache.release(pinned)
    return out


@pytest.mark.parametrize("tokens,block,seed", [(60_000, 512, 0), (300_000, 512, 1),
                                               (20_000, 16, 2), (2_000, 16, 3)])
def test_the_plans_lru_cache_is_the_simulators_cache(tokens: int, block: int, seed: int):
    from workloadlang.plan import lru
    from workloadlang.plan.assemble import streams_of
    from workloadlang.plan.prefix import Prefix, Trie

    rnd = random.Random(seed)
    source = api.load("mooncake")
    wl = api.parse_checked(source)
    offset = str(rnd.randrange(0, 800))
    plan_kw = {"trace": str(SLICE), "limit": "150", "offset": offset, "max_tokens": "600"}
    # the planner's own pass, then the simulator's cache over the same block identities
    from workloadlang.evaluate import resolve_params
    from workloadlang.plan.assemble import plan_sessions
    from workloadlang.plan.limits import Budget, Limits
    from workloadlang.plan.planner import Builder, Ctx, options_value
    params, _ = resolve_params(wl, plan_kw, {"max_context": None})
    b = Builder(wl, "s", {}, Budget(Limits()))
    root = Ctx(session="", session_name="", copy=0, phase="", label=None, index=0, path="",
               env=params)
    b.options = options_value(b, wl.options, root)
    plan_sessions(b, wl, root, tracefile.load_for(wl, params, Limits()))
    trie = Trie()
    streams = streams_of(b, trie)
    caps = [min(e.tokens, d.fields["prompt_tokens"] - 1)
            for e, d in zip(Prefix(trie, streams).run(), b.drafts)]
    prompts = [d.fields["prompt_tokens"] for d in b.drafts]
    generated = [d.generated for d in b.drafts]
    model = lru.replay(trie, streams, generated, prompts, caps, CacheModel(tokens=tokens,
                                                                           block=block))
    assert model == simulator_replay(streams, trie, prompts, generated, caps, block, tokens)
    assert sum(model) > 0


def test_a_small_lru_unit_keeps_the_last_requests():
    lru = Lru(4)
    lru.serve([("a", 2), ("b", 2)], None)
    lru.serve([("c", 3)], None)  # evicts b's blocks, then a's last one
    assert lru.matched([("a", 2), ("b", 2)]) == 1 and lru.matched([("c", 3)]) == 3


# ---------------------------------------------------------------- replay on the simulator

SIM = ["--sim", "--sim-block-size", "512", "--sim-prefill-us-per-token", "0",
       "--sim-decode-us-per-token", "0", "--sim-max-model-len", "200000"]


@pytest.mark.slow
def test_a_replay_at_concurrency_1_measures_the_plans_lru_hit_rate(tmp_path: Path):
    """200 records of the slice (from record 350, where sessions come back to what they sent
    earlier) on the simulator with the plan's block size and capacity (700k tokens: the LRU
    cache keeps about half of what a perfect one would, and a capacity of 500k or 1M would
    keep a point less or more)."""
    code, res = wl_run(tmp_path, "mooncake", "--trace", str(SLICE), "--offset", "350",
                       "--limit", "200", "--time-scale", "0", "--max-concurrency", "1",
                       "--salt", "fidelity", "--cache-tokens", "700k", "--cache-block", "512",
                       "--sim-device-tokens", "700000", *SIM)
    assert code == 0, res.get("gates")
    theory = res["cache_theory"]
    assert theory["requests"] == 200
    assert 0.04 < theory["lru"] < 0.6 * theory["unlimited"]  # eviction matters here
    assert abs(theory["measured"] - theory["lru"]) < 0.005, theory
    sent = sorted(res["records"], key=lambda r: r["t_start_s"])
    assert [r["index"] for r in sent] == list(range(350, 550))  # in the trace's order
    # as fast as the concurrency allows is what the plan asked for: nothing is late
    assert res["client"]["scheduled"] == 0 and not res["client"]["schedule_late"]
    assert all(r["schedule_lag_s"] is None for r in res["records"])


def test_at_higher_concurrency_the_difference_is_reported(tmp_path: Path, capsys):
    code, res = wl_run(tmp_path, "mooncake", "--trace", str(SLICE), "--time-scale", "0",
                       "--limit", "40", "--max-concurrency", "8", "--max-tokens", "4",
                       "--salt", "c8", "--cache-tokens", "1M", "--cache-block", "512",
                       "--sim-device-tokens", "1000000", *SIM)
    assert code == 0
    out = capsys.readouterr().out
    assert "up to 8 requests in flight at once, the theory takes them one at a time" in out
    assert "measured" in out
    theory = res["cache_theory"]
    assert theory["concurrency"] == 8 and theory["measured"] is not None


def test_send_times_are_kept(tmp_path: Path):
    p = write(tmp_path, [GENERIC_HEAD] + [
        {"t": 0.15 * k, "session": k % 2, "input_tokens": 50, "output_tokens": 2}
        for k in range(4)])
    code, res = wl_run(tmp_path, "mooncake", "--trace", str(p), "--salt", "times",
                       "--sim", "--sim-prefill-us-per-token", "0")
    assert code == 0
    for r in res["records"]:
        assert r["t_start_s"] >= r["planned_send_at"] - 0.002, r
    assert max(r["t_start_s"] for r in res["records"]) >= 0.44


def test_a_replay_as_fast_as_the_concurrency_allows_is_never_late(tmp_path: Path, capsys):
    """At time scale 0 the plan promises no send time, only the trace's order at the
    concurrency: requests queued behind it are on schedule, not late."""
    code, res = wl_run(tmp_path, "mooncake", "--trace", str(SLICE), "--time-scale", "0",
                       "--limit", "30", "--max-concurrency", "1", "--max-tokens", "4",
                       "--block-tokens", "16", "--salt", "fast", *SIM)
    out = capsys.readouterr().out
    assert code == 0
    assert res["client"]["scheduled"] == 0 and res["client"]["schedule_late"] == 0
    assert "after their planned time" not in out
    sent = sorted(res["records"], key=lambda r: r["t_start_s"])
    assert [r["index"] for r in sent] == list(range(30))  # in the trace's order
    assert "cache hit rate over 30 request(s)" in out
