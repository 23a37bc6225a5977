"""Simulator configuration: the frozen `SimConfig`, fault specs, presets and argparse wiring.

Input: preset names, argparse namespaces or `--fault NAME[=VALUE][@session,...]` strings.
Output: validated, immutable `SimConfig` objects consumed by `workloadlang.sim.engine`.
"""

from __future__ import annotations

import argparse
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FaultName = Literal[
    "evict_over_concurrency",
    "drop_aborted",
    "degraded",
    "degraded_host",
    "no_cached_report",
    "omit_cached_when_zero",
    "no_timings",
    "duplicate_blocks",
    "error_rate",
    "slow_prefill",
    "corrupt_restored",
    "drift",
]
FAULT_NAMES: tuple[str, ...] = FaultName.__args__  # type: ignore[attr-defined]
_VALUED = {"evict_over_concurrency", "error_rate", "slow_prefill", "corrupt_restored", "drift"}


class FaultSpec(BaseModel):
    """One fault (or behaviour) switched on, optionally scoped to some sessions.

    `value`: the fault's number (N for evict_over_concurrency, P for error_rate, the factor for
    slow_prefill and drift, the position a corrupted reply diverges from for corrupt_restored),
    else None.
    `sessions`: empty = every request; otherwise only requests whose `X-WL-Session` header
    matches one entry (exactly, by base name before `#`, or as an fnmatch glob), or whose
    `X-WL-Request` (the planned request id) matches one exactly or as a glob.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: FaultName
    value: float | None = None
    sessions: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check_value(self) -> FaultSpec:
        if self.name in _VALUED and self.value is None:
            raise ValueError(f"fault {self.name} needs a value ({self.name}=...)")
        if self.name not in _VALUED and self.value is not None:
            raise ValueError(f"fault {self.name} takes no value")
        if self.name == "error_rate" and not 0.0 <= float(self.value or 0) <= 1.0:
            raise ValueError("error_rate must be within 0..1")
        if self.name == "evict_over_concurrency" and (self.value or 0) < 0:
            raise ValueError("evict_over_concurrency must be >= 0")
        if self.name in ("slow_prefill", "drift") and not 0.0 < float(self.value or 0) <= 1000.0:
            raise ValueError(f"{self.name} must be within (0, 1000]")
        if self.name == "corrupt_restored" and (not float(self.value or 0).is_integer()
                                                or (self.value or 0) < 0):
            raise ValueError("corrupt_restored must be a whole position >= 0")
        return self

    def applies_to(self, session: str | None, request: str | None = None) -> bool:
        """True when this fault covers a request carrying `X-WL-Session: session` and
        `X-WL-Request: request`."""
        if not self.sessions:
            return True
        if request and any(p == request or fnmatchcase(request, p) for p in self.sessions):
            return True
        if not session:
            return False
        base = session.split("#", 1)[0]
        return any(p == session or p == base or fnmatchcase(session, p) for p in self.sessions)

    def render(self) -> str:
        """The `--fault` text that parses back into this spec."""
        text: str = self.name
        if self.value is not None:
            v = self.value
            text += f"={int(v) if float(v).is_integer() and self.name != 'error_rate' else v}"
        if self.sessions:
            text += "@" + ",".join(self.sessions)
        return text


def parse_fault(text: str) -> FaultSpec:
    """Parse `NAME[=VALUE][@session,session]` into a `FaultSpec` (ValueError when invalid)."""
    spec, _, scope = text.strip().partition("@")
    name, eq, value = spec.partition("=")
    name = name.strip().replace("-", "_")
    if name not in FAULT_NAMES:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULT_NAMES)}")
    sessions = tuple(s.strip() for s in scope.split(",") if s.strip()) if scope else ()
    return FaultSpec(name=name, value=float(value) if eq else None, sessions=sessions)


class SimConfig(BaseModel):
    """Everything that defines one simulator instance; times are microseconds per token.

    `*_ctx_scale`: per-token cost grows as cost x (1 + position / scale); 0 disables growth.
    `effective_context`: the needle window in tokens (None = max_model_len).
    `eviction`, `evict_first`: the device tier's eviction order (`sim/order.py`);
    `idle_ttl_s`: a block unused for this long is dropped (0: never); `prefill_abort`,
    `decode_abort`: what a request cut during its prefill / its decode leaves cached.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str = "wl-sim"
    max_model_len: int = Field(131072, ge=16)
    effective_context: int | None = Field(None, ge=1)
    block_size: int = Field(16, ge=1)
    device_tokens: int = Field(262144, ge=0)
    host_tokens: int = Field(0, ge=0)
    host_restore_us_per_token: float = Field(0.0, ge=0)
    prefill_us_per_token: float = Field(2.0, ge=0)
    prefill_ctx_scale: float = Field(65536.0, ge=0)
    decode_us_per_token: float = Field(100.0, ge=0)
    decode_ctx_scale: float = Field(0.0, ge=0)
    first_token_us: float = Field(0.0, ge=0)
    eviction: Literal["lru", "fifo", "lfu"] = "lru"
    evict_first: Literal["tail", "head"] = "tail"
    idle_ttl_s: float = Field(0.0, ge=0)
    prefill_abort: Literal["drop", "keep"] = "drop"
    decode_abort: Literal["keep", "prompt", "drop"] = "keep"
    drift_seconds: float = Field(0.0, ge=0, le=3600)
    slots: int = Field(4, ge=1)
    think_tokens: int = Field(1000, ge=0)
    seed: int = 0
    emission_log: int = Field(0, ge=0)
    faults: tuple[FaultSpec, ...] = ()

    @property
    def window(self) -> int:
        """The effective (needle) context in tokens."""
        return self.effective_context or self.max_model_len

    def fault(self, name: str, session: str | None,
              request: str | None = None) -> FaultSpec | None:
        """The first configured fault `name` that applies to `session` (or to the planned
        request id `request`), or None."""
        for f in self.faults:
            if f.name == name and f.applies_to(session, request):
                return f
        return None

    def with_faults(self, *texts: str) -> SimConfig:
        """A copy with the given `--fault` strings appended."""
        return self.model_copy(update={"faults": self.faults + tuple(map(parse_fault, texts))})


# Presets: each sized so the matching bundled workload finishes in seconds at its default params
# while keeping the shape of real timings. Numbers and expected outcomes: docs/simulator.md.
PRESETS: dict[str, SimConfig] = {
    "default": SimConfig(),
    "cache-pressure": SimConfig(
        max_model_len=32768,
        device_tokens=65536,
        host_tokens=16384,
        host_restore_us_per_token=0.5,
        prefill_us_per_token=10.0,
        prefill_ctx_scale=32768,
        decode_us_per_token=200.0,
    ),
    "needle-test": SimConfig(
        max_model_len=524288,
        effective_context=50000,
        device_tokens=524288,
        prefill_us_per_token=1.0,
        prefill_ctx_scale=262144,
        decode_us_per_token=100.0,
    ),
    "agent-sim": SimConfig(
        max_model_len=196608,
        device_tokens=1048576,
        prefill_us_per_token=8.0,
        prefill_ctx_scale=262144,
        decode_us_per_token=200.0,
    ),
    "abort-sim": SimConfig(
        max_model_len=131072,
        device_tokens=262144,
        prefill_us_per_token=5.0,
        prefill_ctx_scale=65536,
        decode_us_per_token=200.0,
    ),
    "chat-rate": SimConfig(
        prefill_us_per_token=20.0,
        prefill_ctx_scale=65536,
        decode_us_per_token=2000.0,
        slots=8,
    ),
    "perf-sim": SimConfig(
        max_model_len=65536,
        device_tokens=262144,
        prefill_us_per_token=5.0,
        prefill_ctx_scale=32768,
        decode_us_per_token=100.0,
        decode_ctx_scale=65536,
    ),
}

_FIELD_HELP = {
    "model": "model id served by /v1/models",
    "max_model_len": "context limit in tokens (longer prompts get HTTP 400)",
    "effective_context": "needle window in tokens (default: max_model_len)",
    "block_size": "prefix-cache block size in tokens",
    "device_tokens": "device KV capacity in tokens",
    "host_tokens": "host tier capacity in tokens (0 = no host tier)",
    "host_restore_us_per_token": "host -> device restore cost, us per token",
    "prefill_us_per_token": "prefill cost, us per uncached token at position 0",
    "prefill_ctx_scale": "prefill cost grows as (1 + position / scale); 0 = flat",
    "decode_us_per_token": "decode cost, us per generated token",
    "decode_ctx_scale": "decode cost grows as (1 + context / scale); 0 = flat",
    "first_token_us": "what any request costs before its first token besides its prefill "
                      "(scheduling, the first decode step), us; not in the reported prefill time",
    "eviction": "device eviction order: lru, fifo or lfu (fewest hits first)",
    "evict_first": "within a sequence, evict its tail or its head first",
    "idle_ttl_s": "a cached block unused for this many seconds is dropped; 0 = never",
    "prefill_abort": "a request cut during its prefill: drop (cache nothing) or keep the "
                     "blocks prefilled before the cut",
    "decode_abort": "a request cut during its decode: keep (prompt and generated), prompt, "
                    "or drop",
    "drift_seconds": "a `drift` fault slows everything from the arrival of the first request it "
                     "names for this long (and while that request is served), s",
    "slots": "concurrent request slots (more requests queue FIFO)",
    "think_tokens": "reasoning tokens emitted when thinking is on",
    "seed": "seed for error injection and reply text",
    "emission_log": "keep the write time of every token of the last N requests "
                    "(GET /sim/emissions; 0 = none)",
}
_FIELD_TYPES = {"model": str, "effective_context": int, "seed": int, "eviction": str,
                "evict_first": str, "prefill_abort": str, "decode_abort": str}
_FIELD_CHOICES = {"eviction": ("lru", "fifo", "lfu"), "evict_first": ("tail", "head"),
                  "prefill_abort": ("drop", "keep"), "decode_abort": ("keep", "prompt", "drop")}


def add_sim_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Add `--{prefix}preset`, one `--{prefix}<field>` per SimConfig field and repeatable
    `--{prefix}fault`. Destinations are always `sim_<field>`, whatever the prefix."""
    group = parser.add_argument_group("simulator")
    group.add_argument(
        f"--{prefix}preset", dest="sim_preset", default=None, choices=sorted(PRESETS),
        help="simulator preset (default: default)",
    )
    defaults = SimConfig()
    for name, help_text in _FIELD_HELP.items():
        kind = _FIELD_TYPES.get(name) or type(getattr(defaults, name))
        group.add_argument(
            f"--{prefix}{name.replace('_', '-')}", dest=f"sim_{name}", type=kind, default=None,
            metavar=name.upper(), help=help_text, choices=_FIELD_CHOICES.get(name),
        )
    group.add_argument(
        f"--{prefix}fault", dest="sim_fault", action="append", default=None,
        metavar="NAME[=VALUE][@SESSION,...]",
        help=f"inject a fault (repeatable): {', '.join(FAULT_NAMES)}",
    )


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """Build a SimConfig from a namespace filled by `add_sim_arguments`: the preset, then each
    flag given, then the faults appended to the preset's own. Raises ValueError when invalid."""
    preset = getattr(ns, "sim_preset", None) or "default"
    if preset not in PRESETS:
        raise ValueError(f"unknown simulator preset {preset!r}; known: {', '.join(PRESETS)}")
    base = PRESETS[preset]
    update = {}
    for name in _FIELD_HELP:
        value = getattr(ns, f"sim_{name}", None)
        if value is not None:
            update[name] = value
    faults = tuple(parse_fault(t) for t in (getattr(ns, "sim_fault", None) or ()))
    data = base.model_dump()
    data.update(update)
    data["faults"] = tuple(base.faults) + faults
    return SimConfig.model_validate(data)
