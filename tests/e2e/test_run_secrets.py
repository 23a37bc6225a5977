"""Credentials through `wl run` (a real subprocess): the key given by `--api-key` or named by
`--api-key-env` is sent as `Authorization: Bearer` on every route (checked on the fault server's
request log) and appears nowhere in what the run leaves: records, results, stdout, stderr, even
when the server repeats it in an error. No credential is read from the environment unless named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faultserver import FaultServer, run_wl
from workloadlang.sim import SimConfig, start_in_thread

KEY = "sk-SECRET123"
ENV_KEY = "sk-ENVSECRET456"
AMBIENT = "sk-AMBIENT789"
WORKLOAD = """
workload keyed {
  session s repeat 2 { user filler 200; reply 4; user "more"; reply 4 }
  gates { clean: overall count(error{s}) == 0 }
}
"""


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:  # noqa: F811
    fault_server.reset()
    return fault_server


def run(tmp_path: Path, base_url: str, *extra: str, env: dict[str, str] | None = None) -> str:
    """Run and return everything the run left behind, as one text (files, stdout, stderr)."""
    wl = tmp_path / "w.wl"
    wl.write_text(WORKLOAD.replace("{s}", "{session=s}"))
    out, rec = tmp_path / "out.json", tmp_path / "r.jsonl"
    proc = run_wl("run", str(wl), "--base-url", base_url, "--no-viz", "--output", str(out),
                  "--records", str(rec), *extra, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    left = [proc.stdout, proc.stderr] + [p.read_text() for p in (out, rec) if p.exists()]
    run.returncode = proc.returncode  # type: ignore[attr-defined]
    return "\n".join(left)


def secret_parts(key: str) -> list[str]:
    return [key, key.removeprefix("sk-")]


def test_key_reaches_the_simulator_run_and_no_output(tmp_path: Path) -> None:
    with start_in_thread(SimConfig(decode_us_per_token=0, prefill_us_per_token=0)) as sim:
        left = run(tmp_path, sim.base_url, "--api-key", KEY)
    assert run.returncode == 0, left  # type: ignore[attr-defined]
    assert '"type":"request"' in left  # the files were really written
    for part in secret_parts(KEY):
        assert part not in left


def test_key_is_sent_as_bearer_on_every_route(tmp_path: Path, server: FaultServer) -> None:
    server.metrics_text = "vllm:prefix_cache_hits_total 0\nvllm:prefix_cache_queries_total 0\n"
    left = run(tmp_path, server.base_url, "--api-key", KEY)
    assert run.returncode == 0, left  # type: ignore[attr-defined]
    paths = {r["path"] for r in server.requests}
    assert {"/v1/models", "/v1/chat/completions", "/metrics"} <= paths
    for r in server.requests:
        assert r["headers"].get("authorization") == f"Bearer {KEY}", r["path"]
    for part in secret_parts(KEY):
        assert part not in left


def test_api_key_env_is_read_when_named(tmp_path: Path, server: FaultServer) -> None:
    left = run(tmp_path, server.base_url, "--api-key-env", "WL_TEST_TOKEN",
               env={"WL_TEST_TOKEN": ENV_KEY})
    assert run.returncode == 0, left  # type: ignore[attr-defined]
    chats = server.chat_requests()
    assert chats and all(r["headers"].get("authorization") == f"Bearer {ENV_KEY}" for r in chats)
    for part in secret_parts(ENV_KEY):
        assert part not in left


def test_environment_is_not_read_unless_named(tmp_path: Path, server: FaultServer) -> None:
    env = {"OPENAI_API_KEY": AMBIENT, "WL_API_KEY": AMBIENT, "API_KEY": AMBIENT}
    left = run(tmp_path, server.base_url, env=env)
    assert run.returncode == 0, left  # type: ignore[attr-defined]
    assert server.requests and all("authorization" not in r["headers"] for r in server.requests)
    assert AMBIENT not in left


def test_named_variable_that_is_unset_is_a_usage_error(tmp_path: Path, server: FaultServer) -> None:
    left = run(tmp_path, server.base_url, "--api-key-env", "WL_TEST_UNSET")
    assert run.returncode == 2  # type: ignore[attr-defined]
    assert "--api-key-env WL_TEST_UNSET: not set" in left
    assert server.requests == []


def test_key_echoed_in_a_chat_error_is_not_recorded(tmp_path: Path, server: FaultServer) -> None:
    server.defaults = {"x-fault": "echo_auth"}
    left = run(tmp_path, server.base_url, "--api-key", KEY)
    assert run.returncode == 4, left  # type: ignore[attr-defined]
    assert "invalid credential" in left and "HTTP 401" in left  # the error itself is kept
    for part in secret_parts(KEY):
        assert part not in left


def test_key_echoed_by_models_is_not_printed(tmp_path: Path, server: FaultServer) -> None:
    server.models_status = 401
    server.models_body = {"error": {"message": f"invalid credential Bearer {KEY}"}}
    left = run(tmp_path, server.base_url, "--api-key", KEY)
    assert run.returncode == 3, left  # type: ignore[attr-defined]
    assert "HTTP 401" in left and "invalid credential" in left
    for part in secret_parts(KEY):
        assert part not in left


def test_a_long_key_cut_by_an_excerpt_leaves_no_fragment(tmp_path: Path, server: FaultServer) -> None:
    """The error message and body are excerpts (200 / 300 characters): an echoed key longer than
    that is cut, and the cut-off beginning must not survive either."""
    key = "sk-" + "".join(f"{i:03d}x" for i in range(100))  # 403 characters
    server.defaults = {"x-fault": "echo_auth"}
    left = run(tmp_path, server.base_url, "--api-key", key)
    assert run.returncode == 4, left  # type: ignore[attr-defined]
    assert "invalid credential" in left and "[redacted]" in left
    assert not any(key[i:i + 12] in left for i in range(len(key) - 12))
