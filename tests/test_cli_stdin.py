"""A prompt read from stdin (``-``, or piped text attached to ``task``/``run``): stdin that
holds no prompt is one ``isoagent:`` line, exit 2, and no model call."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import run_cli, shell
from tests.support.messages_server import MessagesServer

BINARY = "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00"  # how an executable begins

# each command runs in-process, then through the warm daemon: the same output and exit codes
pytestmark = pytest.mark.usefixtures("both_paths")


@pytest.mark.parametrize("args", [["task", "-"], ["run", "-"], ["task", "what is this"]])
def test_binary_stdin_is_refused_in_one_line(
    api_server: MessagesServer, tmp_path: Path, args: list[str]
) -> None:
    done = run_cli([*args, "-C", str(tmp_path)], cli_env(api_server), cwd=tmp_path, input=BINARY)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "isoagent: stdin is binary data (a NUL byte at offset 7), not a prompt\n"
    )
    assert not api_server.requests


@pytest.mark.parametrize(
    "command",
    ["run - 0>/dev/null", "task - 0>/dev/null", "task hi 0>>written.txt"],  # the last: a file
)
def test_stdin_open_only_for_writing_is_one_line(
    api_server: MessagesServer, tmp_path: Path, command: str
) -> None:
    done = shell(
        f"isoagent {command} -C {shlex.quote(str(tmp_path))}", cli_env(api_server), tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "isoagent: cannot read stdin: Bad file descriptor\n"
    assert not api_server.requests


def test_more_stdin_than_a_prompt_can_be_is_refused_unsent(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    done = shell(
        f"head -c 9000000 /dev/zero | tr '\\0' a | isoagent task - -C {shlex.quote(str(tmp_path))}",
        cli_env(api_server),
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "isoagent: stdin holds more than 8 MiB: too much for a prompt\n"
    assert not api_server.requests
