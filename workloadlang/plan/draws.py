"""Random draws for plan-time values: `exponential`, `uniform`, `lognormal`, `gamma`.

Input: a salt, a stable name for where the draw happens (a session copy's statement path and
the call's position), the distribution and its arguments. Output: one number, the same on
every machine and Python version for the same inputs.

Uniforms come from SHAKE-256 of `salt NUL draw NUL name` (never Python's `random`, whose
non-uniform samplers may change between versions); the other distributions are made from them
here: the exponential by its inverse, the normal by Box-Muller, the lognormal from the normal,
the gamma by Marsaglia and Tsang's method. Every distribution is given by its mean (`uniform`
by its ends) and, where its shape is free, the coefficient of variation (standard deviation
over mean): `gamma(m, 1)` is `exponential(m)`, `cv` 0 is the mean itself.

Every draw takes a bounded number of uniforms, whatever its arguments: the coefficient of
variation is at most `MAX_CV`; a gamma of a coefficient under `NORMAL_CV` (a shape over 10^8,
where the rejection test loses its precision and `1 / cv^2` may overflow) is drawn as the
normal it tends to; the rejection loop gives up after `MAX_TRIES` tries (each is accepted with
probability over 0.95) and returns the mode.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Sequence


def fresh_salt(nbytes: int = 4) -> str:
    """Output: a new random salt, `nbytes` random bytes in hex, for a run not given one (the
    caller draws it, never the planner: the same salt plans the same requests)."""
    return secrets.token_hex(nbytes)


DISTRIBUTIONS: dict[str, int] = {"exponential": 1, "uniform": 2, "lognormal": 2, "gamma": 2}
"""Distribution -> its number of arguments."""
_CHUNK = 32  # uniforms made at once (gamma's rejection loop may want more: made on demand)
MAX_CV = 1000.0
"""The largest coefficient of variation (a gamma's shape of 10^-6: nearly every draw 0)."""
NORMAL_CV = 1e-4
"""Below this coefficient of variation a gamma is drawn as a normal (its skew, 2 cv, is lost
in the rounding to 1e-9 of the value's deviation from the mean)."""
MAX_TRIES = 1000
"""Tries of gamma's rejection loop before it returns the mode (never reached in practice)."""


class Uniforms:
    """An endless stream of uniforms in (0, 1) for one name."""

    def __init__(self, salt: str, name: str):
        self.seed = f"{salt}\0draw\0{name}".encode()
        self.made: list[float] = []
        self.used = 0

    def __call__(self) -> float:
        if self.used == len(self.made):
            raw = hashlib.shake_256(self.seed).digest(8 * (len(self.made) + _CHUNK))
            self.made = [(int.from_bytes(raw[i:i + 8], "big") >> 11) / (1 << 53) or 2.0 ** -54
                         for i in range(0, len(raw), 8)]
        self.used += 1
        return self.made[self.used - 1]


def check_args(func: str, args: Sequence[float]) -> str | None:
    """What is wrong with a distribution's arguments, or None."""
    if any(not math.isfinite(a) for a in args):
        return f"`{func}` needs finite numbers"
    if func == "uniform":
        return None if args[0] <= args[1] else f"`uniform(low, high)` needs low <= high, got " \
            f"{args[0]:g} > {args[1]:g}"
    if args[0] < 0:
        return f"the mean of `{func}` must be at least 0, got {args[0]:g}"
    if len(args) > 1 and args[1] < 0:
        return f"the coefficient of variation of `{func}` must be at least 0, got {args[1]:g}"
    if len(args) > 1 and args[1] > MAX_CV:
        return f"the coefficient of variation of `{func}` must be at most {MAX_CV:g}, got " \
            f"{args[1]:g}"
    return None


def sample(func: str, args: Sequence[float], u: Callable[[], float]) -> float:
    """One value of `func(*args)` from the uniforms `u` (arguments already checked)."""
    if func == "uniform":
        return args[0] + (args[1] - args[0]) * u()
    mean = args[0]
    cv = 1.0 if func == "exponential" else args[1]
    if mean == 0 or cv == 0:
        return float(mean)
    if func == "exponential":
        return -mean * math.log(u())
    if func == "lognormal":
        s2 = math.log1p(cv * cv)
        return math.exp(math.log(mean) - s2 / 2 + math.sqrt(s2) * normal(u))
    if cv < NORMAL_CV:
        return mean * (1 + cv * normal(u))
    shape = 1 / (cv * cv)
    return mean / shape * gamma_unit(shape, u)


def normal(u: Callable[[], float]) -> float:
    """A standard normal (Box-Muller)."""
    return math.sqrt(-2 * math.log(u())) * math.cos(2 * math.pi * u())


def gamma_unit(shape: float, u: Callable[[], float]) -> float:
    """A gamma variate of `shape` (1e-6 to 1e8) and scale 1 (Marsaglia and Tsang; below shape 1
    boosted by `U^(1/shape)`); after `MAX_TRIES` rejected tries, its mode."""
    if shape < 1:
        return gamma_unit(shape + 1, u) * u() ** (1 / shape)
    d = shape - 1 / 3
    c = 1 / math.sqrt(9 * d)
    for _ in range(MAX_TRIES):
        x = normal(u)
        v = (1 + c * x) ** 3
        if v <= 0:
            continue
        if math.log(u()) < 0.5 * x * x + d - d * v + d * math.log(v):
            return d * v
    return d


def draw(salt: str, name: str, func: str, args: Sequence[float]) -> float:
    """One draw of `func(*args)` for `name`, rounded to 1e-9 (a value that prints the same
    everywhere)."""
    return round(sample(func, args, Uniforms(salt, name)), 9)
