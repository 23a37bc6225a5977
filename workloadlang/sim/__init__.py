"""The embedded simulator: an OpenAI-compatible inference-engine simulator with a real model of a
block-hashed prefix cache (device + host tiers), a time model, slots and injectable faults.

Public API:
    SimConfig, FaultSpec, PRESETS, parse_fault      -- configuration (`config`)
    add_sim_arguments(parser, prefix=""), config_from_args(ns) -> SimConfig
    create_app(config) -> Starlette                  -- the ASGI app
    serve(config, host="127.0.0.1", port=0)          -- blocking
    start_in_thread(config, host="127.0.0.1", port=0) -> SimHandle  (.base_url, .root_url, .stop())

See docs/simulator.md for the tokenizer, template, cache and time models, faults and presets.
"""

from .app import create_app
from .config import PRESETS, FaultSpec, SimConfig, add_sim_arguments, config_from_args, parse_fault
from .server import SimHandle, serve, start_in_thread

__all__ = [
    "PRESETS",
    "FaultSpec",
    "SimConfig",
    "SimHandle",
    "add_sim_arguments",
    "config_from_args",
    "create_app",
    "parse_fault",
    "serve",
    "start_in_thread",
]
