"""plan: random draws (`exponential`, `uniform`, `lognormal`, `gamma`) and think time
(`wait DURATION reading RATE`).

Input: `.wl` texts, salts; `workloadlang.plan.draws` directly for the distributions' shapes.
Output checked: the planned waits and sizes (the same for the same salt, different for another),
the moments of many draws, plan-time errors of bad arguments, and the `wait` column.
"""

from __future__ import annotations

import math
import statistics

import pytest
from test_plan_semantics import plan_errors, plan_of

from workloadlang.plan import draws
from workloadlang.plan.dryrun import render_plan

THINK = """workload think {
  session user repeat 3 {
    repeat 4 label turn {
      user filler uniform(100, 400)
      reply 16
      wait exponential(2s) reading 40
    }
  }
}"""


def waits(plan) -> list[float]:
    return [r.wait_before for r in plan.requests]


def test_draws_are_the_same_for_a_salt_and_differ_across_salts_sessions_and_turns():
    a, b, c = plan_of(THINK, salt="x"), plan_of(THINK, salt="x"), plan_of(THINK, salt="y")
    assert waits(a) == waits(b) and a.plan_hash == b.plan_hash
    assert waits(a) != waits(c)
    drawn = [w for w in waits(a) if w]
    assert len(drawn) == 9 and len(set(drawn)) == 9  # every session and turn draws its own
    sizes = [r.new_tokens for r in a.requests]
    assert len(set(sizes)) > 6 and all(100 <= s - 3 <= 400 + 3 + 16 for s in sizes)


def test_reading_is_seconds_per_token_of_the_previous_answer():
    plan = plan_of(THINK)
    firsts = [r for r in plan.requests if r.index == 0]
    assert all(r.wait_per_token is None and r.wait_before == 0 for r in firsts)
    later = [r for r in plan.requests if r.index > 0]
    assert all(r.wait_per_token == pytest.approx(1 / 40) for r in later)
    two = plan_of("""workload w { session s { user "a"; reply 4; wait reading 40; wait 1s reading 10
      user "b"; reply 4 } }""")
    assert two.requests[1].wait_per_token == pytest.approx(1 / 40 + 1 / 10)
    assert two.requests[1].wait_before == 1.0


def test_the_dry_run_shows_each_wait():
    text = render_plan(plan_of(THINK, salt="x"), full=True)
    header = text.split("\n\n")[1].splitlines()[0]
    assert "wait" in header.split()
    assert "+ reading 40/s" in text


@pytest.mark.parametrize("call, says", [
    ("uniform(3s, 1s)", "low <= high"),
    ("exponential(-1s)", "at least 0"),
    ("gamma(1s, -1)", "coefficient of variation"),
    ("lognormal(1s, 1001)", "at most 1000"),
])
def test_bad_arguments_are_plan_errors(call: str, says: str):
    errs = plan_errors(f'workload w {{ params {{ x: int = 1 }} session s {{ user "a"; '
                       f'reply 4; wait {call} * $x; user "b"; reply 4 }} }}')
    assert any(says in d.message for d in errs), errs


def sample(func: str, args: list[float], n: int = 20000) -> list[float]:
    return [draws.draw("salt", f"n{i}", func, args) for i in range(n)]


@pytest.mark.parametrize("func, args, mean, cv", [
    ("exponential", [2.0], 2.0, 1.0),
    ("gamma", [3.0, 0.5], 3.0, 0.5),
    ("gamma", [1.0, 2.0], 1.0, 2.0),
    ("lognormal", [5.0, 1.0], 5.0, 1.0),
    ("uniform", [1.0, 3.0], 2.0, (2 / math.sqrt(12)) / 2),
])
def test_each_distribution_has_its_mean_and_coefficient_of_variation(func, args, mean, cv):
    xs = sample(func, args)
    m = statistics.fmean(xs)
    assert m == pytest.approx(mean, rel=0.05)
    assert statistics.pstdev(xs) / m == pytest.approx(cv, rel=0.1)
    assert min(xs) >= 0


def test_zero_spread_is_the_mean():
    assert draws.draw("s", "n", "gamma", [2.0, 0]) == 2.0
    assert draws.draw("s", "n", "lognormal", [2.0, 0]) == 2.0
    assert draws.draw("s", "n", "exponential", [0]) == 0.0


def tiny(exponent: int) -> str:
    """1e-EXPONENT written as a product of divisions (a literal's magnitude is bounded; what
    it computes to is not, below 1)."""
    return "1" + " / 1000000000000000" * (exponent // 15)


@pytest.mark.parametrize("exponent", [165, 155, 30])
def test_a_gamma_of_a_tiny_coefficient_of_variation_is_its_mean(exponent: int):
    """cv 1e-165: `1 / cv^2` divided by zero; 1e-155: the rejection loop never ended."""
    plan = plan_of(f"""workload w {{ params {{ cv: float = {tiny(exponent)} }}
      session s {{ user "a"; reply 4; wait gamma(2s, $cv); user "b"; reply 4 }} }}""")
    assert plan.requests[1].wait_before == pytest.approx(2.0, rel=1e-6)


class Counted:
    """Uniforms (those of `draws.Uniforms`) that refuse to give more than `most`."""

    def __init__(self, most: int):
        self.u, self.left = draws.Uniforms("salt", "n"), most

    def __call__(self) -> float:
        self.left -= 1
        if self.left < 0:
            raise AssertionError("the sampler wants uniforms without end")
        return self.u()


@pytest.mark.parametrize("cv", [1e-155, 1e-12, 1e-5, 0.3, 1.0, 30.0, 1000.0])
def test_a_draw_takes_a_bounded_number_of_uniforms(cv: float):
    for func in ("gamma", "lognormal"):
        value = draws.sample(func, [2.0, cv], Counted(4 * draws.MAX_TRIES + 8))
        assert math.isfinite(value) and value >= 0


def test_the_rejection_loop_gives_up_with_the_mode():
    """Uniforms 1e-10 and 0.5 over and over make the normal -6.8 at every try: v <= 0 below a
    shape of about 5, every try rejected."""
    cycle = iter([1e-10, 0.5] * (draws.MAX_TRIES + 1))
    assert draws.gamma_unit(4.0, lambda: next(cycle)) == pytest.approx(4.0 - 1 / 3)
