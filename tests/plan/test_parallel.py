"""Parallel forks: `spawn N fork|cold parallel [keep first|longest|INDEX] { ... }`.

The planner: a branch's requests wait for what came before the fork and its own branch, the
requests after it for every branch; a branch expects from cache only what certainly finished
before it (checked against a brute force over random nested forks); what a sibling could add is
`exp. max`; `keep` continues from a branch. The runner: branches in flight at once, the kept
branch chosen from how they ended, the continuation sent on its conversation.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runhelp import records, wl_run_text
from workloadlang import api
from workloadlang.check import check
from workloadlang.diagnostics import WorkloadError
from workloadlang.parse import parse
from workloadlang.plan.dryrun import render_plan
from workloadlang.plan.model import Plan, PRequest
from workloadlang.plan.prefix import GEN_ATOM, GEN_PROMPT_TOKENS, concurrent, message_atoms


def plan_of(text: str, **params: str) -> Plan:
    wl = parse(text, "t.wl")
    assert [d for d in check(wl) if d.severity == "error"] == []
    return api.make_plan(wl, api.Source(name="t.wl", text=text), params, salt="par")


BEST_OF = """
workload best_of {
  params { n: int = 4 }
  session main {
    system "You are a coding agent."
    user filler 500
    spawn $n fork parallel keep first as k label sample { reply 64 }
    user "Now test it."
    reply 32 label test
  }
}
"""


def by_label(plan: Plan, label: str) -> list[PRequest]:
    return [r for r in plan.requests if r.label == label]


def test_best_of_n_branches_wait_for_the_parent_and_the_continuation_for_all():
    plan = plan_of(BEST_OF)
    samples, [test] = by_label(plan, "sample"), by_label(plan, "test")
    assert len(samples) == 4 and len({r.lane for r in samples}) == 4
    assert all(r.deps == () for r in samples)  # nothing before them in the session
    assert set(test.deps) == {r.id for r in samples}
    # side by side: none expects another's prompt; any could be served it (exp. max)
    prompt = samples[0].prompt_tokens
    assert [r.expected_cached for r in samples] == [0] * 4
    assert [r.expected_cached_max for r in samples] == [prompt - 1] * 4
    # the continuation: branch 0's prompt and answer, certainly finished
    assert test.expected_cached == prompt + 64
    assert plan.concurrency == 4  # the default: as many requests as can be in flight
    assert len(plan.picks) == 1 and plan.picks[0].rule == "first"


def test_the_dry_run_says_what_a_parallel_fork_assumes():
    text = render_plan(plan_of(BEST_OF))
    assert "parallel fork(s) send their branches' requests side by side" in text
    flat = " ".join(text.split())
    assert ("after the fork of line 7 (main#0) the session goes on from the branch that "
            "finishes first (`keep first`)") in flat
    assert "the same size as any other branch's" in flat
    assert "up to (possible: other sessions, branches first)" in text
    assert " lane" in text.splitlines()[4] and "0.3" in text


def test_one_line_per_keep_statement_and_what_branches_of_different_sizes_mean():
    text = " ".join(render_plan(plan_of("""workload w { session s repeat 2 {
        user filler 100
        repeat 3 { spawn 2 fork parallel keep longest as k { user filler 10 * ($k + 1); reply 8 } }
        reply 8 } }""")).split())
    assert text.count("the session goes on from the branch") == 1
    assert ("after the fork of line 3 (2 sessions: s#0, ...; 6 forks in all) the session goes on "
            "from the branch that ends the longest (`keep longest`)") in text
    assert "the branches differ in size" in text and "same size as any other" not in text


def test_a_sequential_fork_keeps_the_branch_it_names():
    plan = plan_of("""workload w { session s {
        user filler 100; reply 8
        spawn 3 fork keep 2 as k label b { user filler 10 * ($k + 1); reply 8 }
        reply 8 label after } }""")
    branches, [after] = by_label(plan, "b"), by_label(plan, "after")
    assert after.deps == (branches[2].id,) and after.prefix_source == branches[2].id
    assert after.expected_cached == branches[2].prompt_tokens + 8
    assert not plan.picks and all(r.lane == "" for r in plan.requests)


def test_keep_of_a_branch_that_is_not_there_is_refused():
    with pytest.raises(WorkloadError) as exc:
        plan_of("workload w { params { k: int = 2 } "
                "session s { user \"x\"; spawn 2 fork keep $k { reply 4 } } }")
    assert [d.code for d in exc.value.diagnostics] == ["WL431"]


@pytest.mark.parametrize("body, code", [
    ("spawn 2 cold keep 0 { reply 4 }", "WL231"),
    ("spawn 2 fork keep \"a\" { reply 4 }", "WL302"),
    ("spawn 2 fork parallel isolated { reply 4 }", "WL232"),
    ("spawn 2 fork parallel { phase p { reply 4 } }", "WL232"),
    ("spawn 2 fork parallel { turn t isolated { reply 4 } }", "WL232"),
    ("spawn 2 fork parallel { repeat 2 { reply 4 isolated } }", "WL232"),
])
def test_misplaced_parallel_and_keep_are_reported_by_check(body, code):
    wl = parse(f"workload w {{ session s {{ user \"x\"; {body} }} }}", "w.wl")
    assert code in [d.code for d in check(wl)]


def test_waits_in_branches_hold_back_only_their_branch_and_the_join():
    plan = plan_of("""workload w { session s {
        user "x"; reply 4 label a
        spawn 2 fork parallel as k { wait 1s; reply 4 label b; wait 2s * ($k + 1) }
        reply 4 label c } }""")
    [b0, b1], [c] = by_label(plan, "b"), by_label(plan, "c")
    assert (b0.wait_before, b1.wait_before, c.wait_before) == (1.0, 1.0, 4.0)


# ---------------------------------------------------------------- the cache model, brute force


def atoms_of(plan: Plan, last: int | None) -> list:
    out = []
    for i in plan.chain(last):
        out.extend(message_atoms(plan.messages[i]))
    return out


def common(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += x[1]
    return n


def lane_tuple(r: PRequest) -> tuple:
    return tuple(tuple(int(x) for x in part.split(".")) for part in r.lane.split("/")) \
        if r.lane else ()


def brute_force(plan: Plan) -> tuple[list[int], list[int]]:
    """Per request: the longest prefix it shares with a request of its session planned before
    it and not in another branch of one of its forks (its prompt, or its prompt and reply), and
    the longest it shares with one in such another branch."""
    paths = []
    for r in plan.requests:
        base = atoms_of(plan, r.last_message)
        prompt = base + [(GEN_ATOM, GEN_PROMPT_TOKENS)]
        reply = None
        if r.reply_kept != "drop":
            generated = r.abort_after if r.abort_after is not None else r.max_tokens
            reply = base + [(("h", "assistant"), 3),
                            (("p" if r.reply_kept == "partial" else "r", r.id, False), generated)]
        paths.append((prompt, reply))
    certain, most = [], []
    for j, y in enumerate(plan.requests):
        best = side = 0
        for i, x in enumerate(plan.requests):
            if i == j or x.session != y.session:
                continue
            shared = max(common(paths[j][0], p) for p in paths[i] if p is not None)
            if concurrent(lane_tuple(x), lane_tuple(y)):
                side = max(side, shared)
            elif i < j:
                best = max(best, shared)
        certain.append(min(best, y.prompt_tokens - 1))
        most.append(min(side, y.prompt_tokens - 1))
    return certain, most


@st.composite
def bodies(draw, depth: int = 0) -> str:
    stmts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "reply", "probe", "spawn"] if depth < 2
                                    else ["user", "reply", "probe"]))
        if kind == "user":
            stmts.append(f"user filler {draw(st.integers(1, 40))}")
        elif kind == "reply":
            stmts.append(f"reply {draw(st.integers(1, 9))}")
        elif kind == "probe":
            stmts.append("probe")
        else:
            mode = draw(st.sampled_from(["fork", "fork parallel", "cold parallel"]))
            keep = " keep first" if mode == "fork parallel" and draw(st.booleans()) else ""
            stmts.append(f"spawn {draw(st.integers(1, 3))} {mode}{keep} {{ "
                         f"{draw(bodies(depth + 1))} }}")
    return "; ".join(stmts)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies())
def test_the_cache_model_agrees_with_a_brute_force_over_nested_forks(body):
    text = f"workload w {{ session s {{ user \"go\"; reply 3; {body}; reply 2 }} }}"
    plan = plan_of(text)
    certain, most = brute_force(plan)
    assert [r.expected_cached for r in plan.requests] == certain, text
    for r, m in zip(plan.requests, most):
        if r.expected_cached_max is not None:
            assert r.expected_cached_max == max(m, r.expected_cached), (text, r.id)
        else:
            assert m <= r.expected_cached + 3, (text, r.id)


# ---------------------------------------------------------------- the runner


def test_branches_are_in_flight_together_and_the_continuation_waits(tmp_path):
    code, res = wl_run_text(tmp_path, BEST_OF, "--sim", "--salt", "p",
                            "--sim-prefill-us-per-token", "200")
    assert code == 0
    samples, [test] = records(res, "sample"), records(res, "test")
    ends = [r["t_start_s"] + r["e2e_s"] for r in samples]
    assert max(r["t_start_s"] for r in samples) < min(ends)  # all sent before any ended
    assert test["t_start_s"] >= max(ends)
    # sent side by side, none found the others' prompt: each prefilled it
    assert all(r["cached_tokens"] == 0 for r in samples)
    first = min(range(4), key=lambda k: ends[k])
    assert test["prefix_source"] == samples[first]["id"]
    assert test["hit"] is True and test["reuse"] >= 0.95


KEEP = """
workload keep {
  params { rule: string = "longest" one of "longest", "first" }
  session main {
    user filler 200
    reply 8 label start
    if $rule == "longest" {
      spawn 3 fork parallel keep longest as k label branch { user filler 100 * ($k + 1); reply 8 }
    } else {
      spawn 3 fork parallel keep first as k label branch { user filler 1500 - 500 * $k; reply 8 }
    }
    user "Go on."
    reply 8 label after
  }
}
"""


@pytest.mark.parametrize("rule", ["longest", "first"])
def test_the_continuation_goes_on_from_the_kept_branch(tmp_path, rule):
    """Branch 2 is the longest, and (its prompt the shortest to prefill) the first to end: the
    request after the fork is sent on its conversation, and the engine serves all of it."""
    code, res = wl_run_text(tmp_path, KEEP, "--sim", "--salt", "k", "--rule", rule,
                            "--sim-prefill-us-per-token", "300")
    assert code == 0
    branches, [after] = records(res, "branch"), records(res, "after")
    kept = branches[2]
    assert after["prefix_source"] == kept["id"]
    assert after["cached_tokens"] >= kept["prompt_tokens"] + 8 - 16  # its prompt and answer
    assert after["expected_source"] == f"engine:{kept['id']}"
    assert after["hit"] is True and after["reuse"] >= 0.95


# ---------------------------------------------------------------- peak concurrent demand


def in_flight_together(plan: Plan, cap: int) -> int:
    """Brute force: the most tokens (prompt and reply) of requests that can be in flight at
    once, at most `cap` of them: requests of different sessions, or of different branches of
    one fork of a session (every pair), whichever is largest."""
    reqs = plan.requests
    size = [r.prompt_tokens + r.max_tokens for r in reqs]

    def together(i: int, j: int) -> bool:
        a, b = reqs[i], reqs[j]
        return a.session != b.session or concurrent(lane_tuple(a), lane_tuple(b))

    def best(chosen: list[int], start: int) -> int:
        top = sum(size[i] for i in chosen)
        if len(chosen) == cap:
            return top
        for j in range(start, len(reqs)):
            if all(together(i, j) for i in chosen):
                top = max(top, best(chosen + [j], j + 1))
        return top

    return best([], 0)


def test_peak_demand_counts_every_branch_in_flight():
    plan = plan_of(BEST_OF)
    sample = by_label(plan, "sample")[0]
    assert plan.totals.peak_inflight_tokens == 4 * (sample.prompt_tokens + 64)
    assert peak_line(plan) == f"{4 * (sample.prompt_tokens + 64):,} tokens (4 in flight)"
    two = plan_of(BEST_OF.replace("session main {", "concurrency = 2\n"
                                  "  session main {"))
    assert two.totals.peak_inflight_tokens == 2 * (sample.prompt_tokens + 64)
    assert peak_line(two).endswith("(2 in flight)")


def peak_line(plan: Plan) -> str:
    line = next(x for x in render_plan(plan).splitlines() if x.startswith("peak concurrent"))
    return line.removeprefix("peak concurrent demand").strip()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), other=st.integers(0, 60), cap=st.integers(1, 6))
def test_peak_demand_agrees_with_a_brute_force(body, other, cap):
    text = (f"workload w {{ concurrency = {cap} "
            f"session s {{ user \"go\"; reply 3; {body}; reply 2 }} "
            f"session t repeat 2 {{ user filler {other + 1}; reply 4 }} }}")
    plan = plan_of(text)
    assert plan.totals.peak_inflight_tokens == in_flight_together(plan, cap), text


@settings(max_examples=200, deadline=None)
@given(profiles=st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=4).map(
    lambda xs: list(__import__("itertools").accumulate(xs))), min_size=1, max_size=5),
    cap=st.integers(1, 10))
def test_the_split_over_sessions_and_its_bound(profiles, cap):
    """`peak_demand` splits the limit among sessions exactly; its envelope bound (used past a
    work budget) is never below it."""
    from itertools import product

    from workloadlang.plan import lanes

    exact = max(sum(([0] + p)[k] for p, k in zip(profiles, ks))
                for ks in product(*(range(len(p) + 1) for p in profiles)) if sum(ks) <= cap)
    got, n = lanes.peak_demand(profiles, cap)
    assert got == exact and n == min(cap, sum(len(p) for p in profiles))
    assert lanes.envelope_bound(profiles, n) >= exact


def test_a_forks_first_request_counts_what_the_parent_added_as_new():
    """`new`: what a request adds to its conversation. A fork's branch sends the parent's
    messages added since its last request too (a cold spawn's branch does not)."""
    plan = plan_of("""workload w { session s {
        user "go"; reply 4
        user filler 100
        spawn 2 fork parallel label f { user filler 10; reply 4 }
        spawn 1 fork label g { reply 4 }
        spawn 1 cold label c { user filler 10; reply 4 }
        reply 4 label same } }""")
    [same] = by_label(plan, "same")
    assert [r.new_tokens for r in by_label(plan, "f")] == [same.new_tokens + 10] * 2
    assert [r.new_tokens for r in by_label(plan, "g")] == [same.new_tokens]
    assert [r.new_tokens for r in by_label(plan, "c")] == [10]


def convolved(profiles, cap=None):
    """The max-plus convolution of `profiles` by brute force over every split."""
    from itertools import product

    most = sum(len(p) for p in profiles) if cap is None else min(cap, sum(map(len, profiles)))
    return [max(sum(([0] + p)[k] for p, k in zip(profiles, ks))
                for ks in product(*(range(len(p) + 1) for p in profiles)) if sum(ks) == n)
            for n in range(1, most + 1)]


increasing = st.lists(st.integers(0, 50), min_size=1, max_size=4).map(
    lambda xs: list(__import__("itertools").accumulate(xs)))


@settings(max_examples=200, deadline=None)
@given(profiles=st.lists(increasing, min_size=1, max_size=5),
       cap=st.one_of(st.none(), st.integers(1, 10)))
def test_branches_side_by_side_split_exactly_and_their_bound_is_never_below(profiles, cap):
    """Concave branches are merged by their steps, the others split exactly; past the work
    budget every branch is bounded by its concave envelope, never below the exact split."""
    from workloadlang.plan import lanes

    exact = convolved(profiles, cap)
    assert lanes.side_by_side(profiles, cap) == exact
    budget = lanes.DP_BUDGET
    try:
        lanes.DP_BUDGET = 0
        bound = lanes.side_by_side(profiles, cap)
    finally:
        lanes.DP_BUDGET = budget
    assert len(bound) == len(exact) and all(b >= e for b, e in zip(bound, exact))
    if all(lanes.is_concave(p) for p in profiles):
        assert bound == exact


def test_a_fork_of_fifty_thousand_branches_is_merged_by_its_steps():
    """Was a quadratic split (13 s at 5,000 branches, over 60 s at 50,000): one-request
    branches are concave, merged largest step first."""
    from workloadlang.plan import lanes

    assert lanes.steps(list(range(3, 300_003, 3))) == [3.0] * 100_000  # in linear time
    assert lanes.envelope_bound([[5, 6, 20]], 2) == 14  # the envelope of 5, 6, 20: 6.67 a step
    sizes = [(k * 7919) % 1000 + 1 for k in range(50_000)]
    got = lanes.side_by_side([[x] for x in sizes], cap=None)
    assert got[:3] == [1000, 2000, 3000] and got[-1] == sum(sizes) and len(got) == 50_000
