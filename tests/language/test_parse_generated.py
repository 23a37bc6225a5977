"""Generated valid workloads: they parse, their IR survives a JSON round trip, and `check` finds
nothing wrong with them (the generator only writes well-typed programs)."""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloadlang import ir
from workloadlang.check import check
from workloadlang.parse import parse

NUMBERS = st.sampled_from(["1", "16", "8k", "1.5k", "64Ki", "2M"])
DURATIONS = st.sampled_from(["0s", "500ms", "2s", "1min"])
RATIOS = st.sampled_from(["0.5", "95%", "0%"])
LABELS = st.sampled_from(["a", "b", "main", "verify"])


@functools.cache
def number_expr(refs: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Non-negative number expressions over `refs` (so a range `in 0..` always holds)."""
    atoms = NUMBERS | st.sampled_from(refs).map(lambda r: f"${r}") if refs else NUMBERS
    return st.recursive(atoms, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "*", "//"]), inner).map(" ".join),
        inner.map(lambda e: f"({e})"),
        st.tuples(st.sampled_from(["ceil", "floor", "max", "min"]), inner).map(
            lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"if({t[0]} > {t[1]}, {t[0]}, {t[1]})"),
    ), max_leaves=4)


@functools.cache
def statements(refs: tuple[str, ...], depth: int = 0) -> st.SearchStrategy[str]:
    """One to four statements (blocks nest two deep), using only the refs in scope."""
    n = number_expr(refs)
    positive = n.map(lambda e: f"max(1, {e})")  # max_tokens and a grow step take at least 1
    stmt = st.one_of(
        st.tuples(st.sampled_from(["system", "user", "assistant"]), n, RATIOS).map(
            lambda t: f'{t[0]} "hi", filler {t[1]} needle at {t[2]}'),
        st.tuples(positive, st.sampled_from(["", "replay", "drop", "synthetic"]), LABELS).map(
            lambda t: f"reply {t[0]} {t[1]} label {t[2]} options {{ seed = 1 }}"),
        st.tuples(positive, st.integers(0, 9)).map(lambda t: f"probe {t[0]} as p{t[1]}"),
        DURATIONS.map(lambda d: f"wait {d}"),
    )
    if depth < 2:
        var = f"v{depth}"
        body = statements(refs, depth + 1).map(lambda b: "{ " + b + " }")
        loop_body = statements((*refs, var), depth + 1).map(lambda b: "{ " + b + " }")
        stmt = stmt | st.one_of(
            st.tuples(LABELS, body).map(lambda t: f"turn {t[0]} {t[1]}"),
            st.tuples(n, n, loop_body).map(
                lambda t: f"for {var} in reverse {t[0]}..{t[1]} until miss {t[2]}"),
            st.tuples(n, loop_body).map(lambda t: f"repeat {t[0]} as {var} label a {t[1]}"),
            st.tuples(n, positive, loop_body).map(
                lambda t: f"grow until {t[0]} by {t[1]} as {var} {t[2]}"),
            st.tuples(n, loop_body).map(lambda t: f"spawn {t[0]} fork as {var} {t[1]}"),
            body.map(lambda b: f"fresh label b {b}"),
            st.tuples(n, body, body).map(lambda t: f"if {t[0]} > 1 {t[1]} else {t[2]}"),
        )
    if depth == 0:  # phases do not nest: only at the top, around simple statements
        flat = statements(refs, 2).map(lambda b: "{ " + b + " }")
        stmt = stmt | st.tuples(LABELS, flat).map(lambda t: f"phase {t[0]} {t[1]}")
    return st.lists(stmt, min_size=1, max_size=4).map("\n".join)


@st.composite
def workloads(draw: st.DrawFn) -> str:
    names = draw(st.lists(st.sampled_from(["n", "size", "step", "count"]), unique=True, max_size=3))
    params = []
    for i, name in enumerate(names):
        default = draw(number_expr(tuple(names[:i])))
        params.append(f"{name}: tokens = ceil({default}) in 0.. doc \"{name}\"")
    uses = " ".join(f"${n}" for n in names) or "1"
    body = draw(statements(tuple(names)))
    gate = draw(st.sampled_from([
        "g: overall count(ok{a}) >= 0 -> bad warn",
        "g: each session reuse{a, warm, last 2} >= 50% * 1",
        "g: overall median(ttft{phase=verify}) < 2s + 1s",
        "g: overall all(hit{b})",
    ]))
    return f"""workload generated {{
      doc "generated"
      params {{ {"; ".join(params)} }}
      concurrency = 2; settle = 1s
      options {{ seed = 7, extra = {{ deep = [1, "x", null] }} }}
      session main repeat 2 {{
        turn a {{ user filler {uses.replace(" ", " + ")}; reply 1 }}
        turn b {{ phase verify {{ reply 1 }} }}
        {body}
      }}
      gates {{ {gate} }}
      report {{ r: mean(prompt_tokens{{a}}) / 2 as tokens by index }}
    }}"""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_generated_workloads_round_trip_and_check(text: str):
    wl = parse(text, "gen.wl")
    assert ir.Workload.model_validate_json(wl.model_dump_json()) == wl
    # request names may repeat, and random statements may end with a `wait` (WL236, a warning)
    assert [d for d in check(wl) if d.code not in ("WL202", "WL236")] == []
