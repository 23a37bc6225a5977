"""Shared pytest fixtures, and the suite's scheduling under xdist (`scheduling.py`). Keep each
fixture thin: put its logic in a helper module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:  # tests/ is on sys.path in pytest's default (prepend) import mode
    from faultserver import fault_server  # noqa: F401  (a fixture for every test module)
    from llama import LlamaServer, llama_server_session
    from scheduling import pytest_collection_modifyitems, pytest_configure, pytest_runtest_protocol  # noqa: F401
except ImportError:  # tests/ turned into a package
    from tests.faultserver import fault_server  # noqa: F401
    from tests.llama import LlamaServer, llama_server_session
    from tests.scheduling import (  # noqa: F401
        pytest_collection_modifyitems,
        pytest_configure,
        pytest_runtest_protocol,
    )


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A real llama-server (SmolLM2-135M Q4_1, -c 8192 -np 1 --metrics, alias `smollm2`).

    Yields a tests.llama.LlamaServer: .base_url (http://127.0.0.1:PORT/v1), .root_url, .port,
    .log_path (the server's stderr+stdout). Skips when the binary is missing, unless
    WL_REQUIRE_LLAMA=1 (then fails). Mark tests using it with @pytest.mark.llama.
    """
    yield from llama_server_session(tmp_path_factory)

