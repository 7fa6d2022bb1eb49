"""The Python API runs in the test's own process: its environment is set as ``cli_env``
sets a command's, pointed at the test's Messages server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer


def use_server(monkeypatch: pytest.MonkeyPatch, server: MessagesServer, home: Path) -> None:
    """``os.environ`` as ``cli_env(server)``, with ``home`` as HOME, until the test ends."""
    for name, value in cli_env(server, HOME=str(home)).items():
        monkeypatch.setenv(name, value)
