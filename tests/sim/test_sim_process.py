"""`wl run --sim` serves the simulator from a child process (`sim.server.start_in_process`):
the client measuring it shares no interpreter lock, event loop or socket reader with it."""

from __future__ import annotations

import os
import sys

import httpx
import pytest

from workloadlang.sim import SimConfig
from workloadlang.sim import server as sim_server

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the child process is POSIX-only")


def test_a_child_process_serves_the_configuration_it_was_given_and_stops() -> None:
    handle = sim_server.start_in_process(SimConfig(model="child-model", max_model_len=4096))
    try:
        models = httpx.get(f"{handle.base_url}/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["child-model"]
        assert handle._proc.pid != os.getpid() and handle._proc.poll() is None  # noqa: SLF001
    finally:
        handle.stop()
    assert handle._proc.returncode is not None  # noqa: SLF001
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{handle.base_url}/models", timeout=2)


def test_a_child_that_does_not_start_is_an_error_not_a_hang(monkeypatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="simulator did not start"):
        sim_server.start_in_process(SimConfig(), timeout=20)


def test_wl_run_sim_does_not_serve_from_its_own_process(tmp_path, monkeypatch) -> None:
    from runhelp import wl_run

    def in_thread(*args, **kw):  # noqa: ANN002, ANN003
        raise AssertionError("wl run --sim started the simulator in its own process")

    monkeypatch.setattr(sim_server, "start_in_thread", in_thread)
    code, res = wl_run(tmp_path, "agent-sim", "--sim", "--sessions", "1", "--main-tokens", "2k",
                       "--step-tokens", "500", "--sub-tokens", "500", "--finalize-tokens", "300",
                       "--sim-prefill-us-per-token", "40")  # timing can tell a recompute
    assert code == 0 and res["records"], res.get("incomplete")
