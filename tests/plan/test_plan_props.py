"""plan: properties (Hypothesis) of the planner on bundled and generated workloads.

- Same salt: byte-identical plan JSON and the same plan hash, in this process and across
  processes (`wl plan --json` in two subprocesses with different hash seeds).
- Different salts: different filler text and different hashes; the schedule itself (sizes, ids,
  expectations) does not depend on the salt.
- Sessions, sub-agents and contexts never share filler: every filler key lives in one message,
  session copies share no message, cold sub-agents share no filler with anything; a fork shares
  exactly its parent's messages.
- A perfect cache never serves the whole prompt: 0 <= expected_cached <= prompt_tokens - 1.
- Growth: step k's expected cached tokens cover step k-1's prompt (and its replayed reply).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadlang import api
from workloadlang.cli.main import main as wl_main
from workloadlang.plan import synth
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.prefix import GEN_PROMPT_TOKENS
from workloadlang.resources import bundled_workloads

BUNDLED = [name for name, _ in bundled_workloads()]
SLICE = str(Path(__file__).parents[1] / "data" / "mooncake" / "conversation_1000.jsonl")
# Small params so a bundled plan takes milliseconds; the golden tests cover the defaults.
SMALL = {
    "abort-sim": {"context_tokens": "2k"},
    "agent-sim": {"main_tokens": "20k", "sub_tokens": "4k", "sessions": "2"},
    "cache-pressure": {"kv_size": "64k"},
    "mooncake": {"trace": SLICE, "limit": "60"},
    "needle-test": {"lengths": "1k,2k"},
    "perf-sim": {"context_limit": "40k"},
    "shared-prompt": {"sessions": "3", "system_tokens": "2k", "turns": "2"},
    "tenant-flood": {"victim_tokens": "8k", "tenants": "6"},
    "idle-resume": {"sessions": "2", "fill_tokens": "8k", "idle": "2s"},
    "coding-agent": {"sessions": "2", "tasks": "1", "system_tokens": "1k", "tools_tokens": "1k",
                     "read_tokens": "1k", "sub_tokens": "1k"},
    "chat-rate": {"users": "4", "turns": "3", "system_tokens": "1k", "length": "5s", "warm": "1s"},
}
FLAGS = {"cache-pressure": ["--kv-size", "65536"], "perf-sim": ["--max-context", "65536"],
         "mooncake": ["--trace", SLICE, "--limit", "200"]}

salts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=24)


def bundled_plan(name: str, salt: str) -> Plan:
    source = api.load(name)
    return api.make_plan(api.parse_checked(source), source, SMALL[name], salt=salt)


def plan_text(text: str, salt: str) -> Plan:
    source = api.Source(name="gen.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, {}, salt=salt)


def cli_json(name: str, salt: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert wl_main(["plan", name, f"--salt={salt}", "--json", *FLAGS.get(name, [])]) == 0
    return out.getvalue()


# ---------------------------------------------------------------- generated workloads


@dataclass(frozen=True)
class Shape:
    """A small agent-like workload: sessions that grow, spawn and come back."""

    sessions: int
    system: bool
    steps: int
    step_tokens: int
    reply_tokens: int
    mode: str  # replay | synthetic | drop
    subs: int
    spawn: str  # cold | fork
    sub_tokens: int
    finalize_tokens: int

    def text(self) -> str:
        system = 'system "You are a helpful assistant."' if self.system else ""
        return f"""workload generated {{
  session main repeat {self.sessions} {{
    {system}
    grow until {self.steps * self.step_tokens} by {self.step_tokens} label main {{
      user filler {self.step_tokens}
      reply {self.reply_tokens} {self.mode}
    }}
    spawn {self.subs} {self.spawn} label sub {{
      {system}
      user filler {self.sub_tokens}
      reply {self.reply_tokens}
    }}
    turn finalize {{ user filler {self.finalize_tokens}; reply {self.reply_tokens} }}
  }}
}}"""


shapes = st.builds(
    Shape, sessions=st.integers(1, 3), system=st.booleans(), steps=st.integers(1, 6),
    step_tokens=st.integers(1, 3000), reply_tokens=st.integers(1, 200),
    mode=st.sampled_from(["replay", "synthetic", "drop"]), subs=st.integers(0, 3),
    spawn=st.sampled_from(["cold", "fork"]), sub_tokens=st.integers(1, 3000),
    finalize_tokens=st.integers(1, 3000))


def by_label(plan: Plan, session: str, label: str) -> list[PRequest]:
    return [r for r in plan.requests if r.session == session and r.label == label]


def filler_keys(plan: Plan, msgs) -> set[str]:
    """The fillers of messages `msgs`, but a named text's (`text NAME = ...`: the same bytes
    in every conversation that sends it, by design)."""
    return {s.key for i in msgs for s in plan.messages[i].segs
            if s.kind == "filler" and not s.key.startswith("text:")}


@settings(max_examples=150, deadline=None)
@given(shape=shapes, salt=salts)
def test_expected_cached_is_never_the_whole_prompt(shape: Shape, salt: str):
    plan = plan_text(shape.text(), salt)
    for r in plan.requests:
        assert 0 <= r.expected_cached <= r.prompt_tokens - 1, r.id
    t = plan.totals
    assert t.prompt_tokens == sum(r.prompt_tokens for r in plan.requests)
    assert t.cold_tokens == t.prompt_tokens - t.expected_cached_tokens >= 0


@settings(max_examples=150, deadline=None)
@given(shape=shapes, salt=salts)
def test_growth_reuses_the_previous_step(shape: Shape, salt: str):
    plan = plan_text(shape.text(), salt)
    past_prompt = {"replay": shape.reply_tokens, "synthetic": 0, "drop": -GEN_PROMPT_TOKENS}
    for s in plan.sessions:
        main = by_label(plan, s.id, "main")
        assert len(main) == shape.steps
        for prev, cur in zip(main, main[1:]):
            assert cur.expected_cached == prev.prompt_tokens + past_prompt[shape.mode]
            if shape.mode != "drop":
                assert cur.expected_cached >= prev.prompt_tokens
            assert cur.prompt_tokens > prev.prompt_tokens
        (fin,) = by_label(plan, s.id, "finalize")
        # Back to main after the sub-agents: at least what the last main step left.
        assert fin.expected_cached >= main[-1].prompt_tokens + past_prompt[shape.mode]


@settings(max_examples=150, deadline=None)
@given(shape=shapes, salt=salts)
def test_conversations_never_share_filler_unless_forked(shape: Shape, salt: str):
    plan = plan_text(shape.text(), salt)
    keys = [s.key for m in plan.messages for s in m.segs
            if s.kind == "filler" and not s.key.startswith("text:")]
    assert len(keys) == len(set(keys)), "a filler key in two messages"
    per_session = {s.id: set() for s in plan.sessions}
    for r in plan.requests:
        per_session[r.session].update(plan.message_ids(r))
    sessions = list(per_session.values())
    for i, a in enumerate(sessions):
        for b in sessions[i + 1:]:
            assert a.isdisjoint(b)
    for s in plan.sessions:
        main, subs = by_label(plan, s.id, "main"), by_label(plan, s.id, "sub")
        (fin,) = by_label(plan, s.id, "finalize")
        parent = plan.message_ids(fin)[:len(plan.message_ids(main[-1])) + (shape.mode != "drop")]
        own = [set(plan.message_ids(r)) - set(parent) for r in subs]
        for i, a in enumerate(own):
            assert filler_keys(plan, a), "each sub-agent has its own filler"
            for b in own[i + 1:]:
                assert filler_keys(plan, a).isdisjoint(filler_keys(plan, b))
            assert filler_keys(plan, a).isdisjoint(filler_keys(plan, plan.message_ids(fin)))
        for r in subs:
            if shape.spawn == "fork":
                assert plan.message_ids(r)[:len(parent)] == parent
            else:
                assert filler_keys(plan, plan.message_ids(r)).isdisjoint(filler_keys(plan, parent))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, salt=salts)
def test_same_salt_same_plan_bytes(shape: Shape, salt: str):
    a, b = plan_text(shape.text(), salt), plan_text(shape.text(), salt)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.plan_hash == b.plan_hash and len(a.plan_hash) == 16


@settings(max_examples=60, deadline=None)
@given(shape=shapes, salts=st.lists(salts, min_size=2, max_size=2, unique=True))
def test_the_schedule_does_not_depend_on_the_salt(shape: Shape, salts: list[str]):
    a, b = (plan_text(shape.text(), s) for s in salts)
    assert a.plan_hash != b.plan_hash
    strip = {"salt", "plan_hash"}
    assert a.model_dump(exclude=strip) == b.model_dump(exclude=strip)


# ---------------------------------------------------------------- bundled workloads


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(BUNDLED), salt=salts)
def test_bundled_same_salt_same_json(name: str, salt: str):
    a, b = bundled_plan(name, salt), bundled_plan(name, salt)
    assert a.model_dump_json() == b.model_dump_json() and a.plan_hash == b.plan_hash
    assert all(0 <= r.expected_cached < r.prompt_tokens for r in a.requests)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(BUNDLED), salts=st.lists(salts, min_size=2, max_size=2, unique=True))
def test_bundled_different_salts_different_text_and_hash(name: str, salts: list[str]):
    a, b = (bundled_plan(name, s) for s in salts)
    assert a.plan_hash != b.plan_hash
    keys = [s.key for m in a.messages for s in m.segs if s.kind == "filler"]
    assert keys
    for key in keys[:3]:
        assert synth.filler(salts[0], key, 64) != synth.filler(salts[1], key, 64)
    needles = [e.text for r in a.requests for e in r.expect if e.what == "needle"]
    other = [e.text for r in b.requests for e in r.expect if e.what == "needle"]
    assert len(needles) == len(other)


def test_needle_codes_follow_the_salt():
    a, b = bundled_plan("needle-test", "one"), bundled_plan("needle-test", "two")
    codes_a = [e.text for r in a.requests for e in r.expect]
    codes_b = [e.text for r in b.requests for e in r.expect]
    assert len(codes_a) == 2 and all(codes_a) and codes_a != codes_b
    again = bundled_plan("needle-test", "one")
    assert codes_a == [e.text for r in again.requests for e in r.expect]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(BUNDLED), salt=salts)
def test_same_salt_same_plan_across_processes(name: str, salt: str):
    """Two fresh interpreters with different hash seeds (started side by side) print the same
    bytes as this one."""
    procs = [subprocess.Popen([sys.executable, "-m", "workloadlang.cli", "plan", name,
                               f"--salt={salt}", "--json", *FLAGS.get(name, [])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONHASHSEED": seed})
             for seed in ("1", "2")]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        outs.append(out)
    assert outs[0] == outs[1]
    assert outs[0].decode() == cli_json(name, salt)
    assert json.loads(outs[0])["salt"] == salt


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_plan_hash_is_stable_across_processes(name: str):
    """The golden salt's hash, computed in a fresh process, equals this process's."""
    r = subprocess.run([sys.executable, "-m", "workloadlang.cli", "plan", name, "--salt=golden",
                        "--json", *FLAGS.get(name, [])], capture_output=True, text=True,
                       env={**os.environ, "PYTHONHASHSEED": "random"}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plan_hash"] == json.loads(cli_json(name, "golden"))["plan_hash"]


@pytest.mark.parametrize("name", [n for n in BUNDLED if n != "mooncake"])
def test_bundled_conversations_never_share_filler(name: str):
    """No two requests of different conversations (session copies, sub-agents, contexts, fresh
    runs) have a filler message in common, unless one request's prompt is a prefix of the
    other's (a conversation growing, or a resend), the filler is in the part of their
    prompts they share (forks of one conversation: agent-sim's baselines), or it is a named
    text's (shared-prompt's system prompt: shared by design). (A trace's requests
    share the blocks their ids share: tests/plan/test_trace.py.)"""
    plan = bundled_plan(name, "props")
    keys = [s.key for m in plan.messages for s in m.segs
            if s.kind == "filler" and not s.key.startswith("text:")]
    assert keys and len(keys) == len(set(keys))
    fill = [filler_keys(plan, plan.message_ids(r)) for r in plan.requests]
    for i, a in enumerate(plan.requests):
        for j in range(i + 1, len(plan.requests)):
            b = plan.requests[j]
            ma, mb = plan.message_ids(a), plan.message_ids(b)
            same = ma == mb[:len(ma)] or mb == ma[:len(mb)]
            common = 0
            while common < min(len(ma), len(mb)) and ma[common] == mb[common]:
                common += 1
            own_a = filler_keys(plan, ma[common:])
            own_b = filler_keys(plan, mb[common:])
            assert same or (own_a.isdisjoint(fill[j]) and own_b.isdisjoint(fill[i])), \
                (a.id, b.id)
