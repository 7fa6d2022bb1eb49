"""What the CLI imports: ``--help`` nothing heavy, a command only its own module."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from isoagent.parent.cli.main import COMMANDS
from tests.conftest import cli_env
from tests.support.cli import run_cli_listing_modules
from tests.support.messages_server import MessagesServer, text_reply

HEAVY = {"asyncio", "ssl", "anthropic", "httpx", "httpx2", "pydantic", "msgspec", "yaml", "rich"}


def imported(args: list[str], cwd: Path) -> set[str]:
    done, modules = run_cli_listing_modules(args, dict(os.environ), cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return modules


def test_help_imports_click_and_no_command_asyncio_ssl_or_sdk(tmp_path: Path) -> None:
    modules = imported(["--help"], tmp_path)
    assert "click" in modules
    assert not {m.split(".")[0] for m in modules} & HEAVY
    assert not {module for module, _ in COMMANDS.values()} & modules


@pytest.mark.parametrize("command", [["agents"], ["logs"]], ids=["agents", "logs"])
def test_a_command_that_runs_no_session_imports_no_asyncio_or_ssl(
    command: list[str], tmp_path: Path
) -> None:
    """``isoagent agents`` lists files: asyncio and ssl are a third of its start-up."""
    modules = {m.split(".")[0] for m in imported(command, tmp_path)}
    assert "isoagent" in modules
    assert not modules & {"asyncio", "ssl", "anthropic"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_imports_its_own_module_and_no_other_command(name: str, tmp_path: Path) -> None:
    modules = imported([name, "--help"], tmp_path)
    own = COMMANDS[name][0]
    assert own in modules
    assert not {module for module, _ in COMMANDS.values() if module != own} & modules
    assert not {"anthropic", "rich"} & {m.split(".")[0] for m in modules}


def test_a_task_off_a_terminal_does_not_import_the_terminal_library(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """rich draws the live block on a terminal; a script's or CI's run does not pay for it."""
    api_server.handler = lambda req: text_reply("done")
    done, modules = run_cli_listing_modules(["task", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "isoagent.parent.cli.task" in modules and "rich" not in modules


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_command_list_shows_each_commands_own_short_help(name: str) -> None:
    module, short_help = COMMANDS[name]
    command = getattr(importlib.import_module(module), name)
    assert command.name == name
    assert command.get_short_help_str(limit=1000) == short_help
