"""Shared pytest fixtures and helpers."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import PATHS, use_path
from tests.support.messages_server import MessagesServer, text_reply
from tests.support.warm import WarmGateways, leftovers

# Off unless a test asks: `cli_env(api_server)` asks, the tests about the gateway start their own.
os.environ["ISOAGENT_WARM_GATEWAY"] = "0"
# The user's state folder (the key that seals runs, the workspace trust record) is the test
# session's own, never the user's who runs the tests; every process a test starts inherits it.
_STATE = tempfile.mkdtemp(prefix="isoagent-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)
_gateways = WarmGateways()


def base_env(**extra: str) -> dict[str, str]:
    """os.environ minus ANTHROPIC_*/ISOAGENT_*, with the warm gateway off, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "ISOAGENT_"))}
    env["ISOAGENT_WARM_GATEWAY"] = "0"
    env["ISOAGENT_WARM_DAEMONS"] = "64"  # the tests' own daemons stop none of the others'
    env.update(extra)
    return env


def cli_env(server: MessagesServer, **extra: str) -> dict[str, str]:
    """`base_env` pointed at `server`, plus `extra`. With the `api_server`, the warm gateway
    is on (as it is for a user): one per worker keeps the SDK imported, so a test's
    ``isoagent`` process does not spend a second of CPU importing it. ``run_cli`` turns it
    off for a command it runs in-process (see `in_process_env`)."""
    env = base_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test-key")
    if server is _gateways.server:
        env |= _gateways.env
    env |= extra
    _gateways.used(env)
    return env


def shared_gateway(env: dict[str, str]) -> dict[str, str]:
    """``env``, pointed at the `api_server`, with the worker's warm gateway on."""
    return _gateways.on(env)


def daemon_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the warm daemon on: the worker's, kept for the session, for the
    `api_server`; one that leaves soon when idle for any other configuration."""
    shared = _gateways.server is not None and env.get("ANTHROPIC_BASE_URL") == (
        _gateways.server.base_url
    )
    env = {**env, **_gateways.env}
    if not shared:
        env["ISOAGENT_WARM_GATEWAY_IDLE"] = "3"
    _gateways.used(env)
    return env


@pytest.fixture(params=PATHS)
def both_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs its commands in-process, then through the warm daemon."""
    use_path(request.param)
    try:
        yield request.param
    finally:
        use_path("in-process")


def in_process_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a command run in the worker: see `WarmGateways.in_process`."""
    return _gateways.in_process(env)


@pytest.fixture(scope="session", autouse=True)
def _no_daemon_outlives_the_suite() -> Iterator[None]:
    """A warm daemon still serving one of this worker's servers once its tests are done is
    an error: the suite leaves nothing running."""
    yield
    _gateways.end_all()
    left = leftovers()
    assert not left, f"warm daemons outlived the tests: {left}"


@pytest.fixture(scope="session")
def _shared_api_server() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        _gateways.server = server
        yield server
        _gateways.end_all()


@pytest.fixture
def api_server(_shared_api_server: MessagesServer) -> Iterator[MessagesServer]:
    """A started MessagesServer answering text_reply("ok"); set `.handler` to script it.

    One server per worker, forgotten between tests. A test that got a reply clients retry
    (429, 5xx) or stopped the server ends the warm gateways it used, so no backoff or
    learned limit reaches the next test."""
    server = _shared_api_server
    server.reset(lambda _req: text_reply("ok"))
    _gateways.test_started()
    yield server
    if server.retried_replies or not server.running:
        _gateways.end_this_tests()
    server.start()  # again, on another port, after a test that stopped it


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder, ``ws``, in the test's temporary folder."""
    path = tmp_path / "ws"
    path.mkdir()
    return path
