"""The embedded simulator: an OpenAI-compatible inference-engine simulator with a real model of a
block-hashed prefix cache (device + host tiers), a time model, slots and injectable faults.

Public API:
    SimConfig, FaultSpec, PRESETS, parse_fault      -- configuration (`config`)
    add_sim_arguments(parser, prefix=""), config_from_args(ns) -> SimConfig
    create_app(config) -> Starlette                  -- the ASGI app
    serve(config, host="127.0.0.1", port=0)          -- blocking
    start_in_process(config, host="127.0.0.1", port=0) -> SimProcess  (.base_url, .root_url, .stop())
    start_in_thread(config, host="127.0.0.1", port=0) -> SimHandle  (.base_url, .root_url, .stop(), .sim)

See docs/simulator.md for the tokenizer, template, cache and time models, faults and presets.
"""

from .config import PRESETS, FaultSpec, SimConfig, add_sim_arguments, config_from_args, parse_fault

_LAZY = {"create_app": "app", "SimHandle": "server", "SimProcess": "server", "serve": "server",
         "start_in_process": "server", "start_in_thread": "server"}


def __getattr__(name: str):
    """The server half (starlette, uvicorn) is imported only when used, so `wl plan` and
    `wl check`, which only need the option parser, start fast."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)

__all__ = [
    "PRESETS",
    "FaultSpec",
    "SimConfig",
    "SimHandle",
    "SimProcess",
    "add_sim_arguments",
    "config_from_args",
    "create_app",
    "parse_fault",
    "serve",
    "start_in_process",
    "start_in_thread",
]
