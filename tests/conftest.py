"""Shared pytest fixtures and helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.messages_server import MessagesServer, text_reply

# No test leaves a warm gateway running: the ones about it start and end their own.
os.environ["ISOAGENT_WARM_GATEWAY"] = "0"


def base_env(**extra: str) -> dict[str, str]:
    """os.environ minus ANTHROPIC_*/ISOAGENT_*, with the warm gateway off, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "ISOAGENT_"))}
    env["ISOAGENT_WARM_GATEWAY"] = "0"
    env.update(extra)
    return env


def cli_env(server: MessagesServer, **extra: str) -> dict[str, str]:
    """`base_env` pointed at `server`, plus `extra`."""
    return base_env(
        **{"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "test-key", **extra}
    )


@pytest.fixture
def api_server() -> Iterator[MessagesServer]:
    """A started MessagesServer answering text_reply("ok"); set `.handler` to script it."""
    with MessagesServer(lambda _req: text_reply("ok")) as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder, ``ws``, in the test's temporary folder."""
    path = tmp_path / "ws"
    path.mkdir()
    return path
