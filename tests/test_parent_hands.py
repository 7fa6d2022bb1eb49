"""The parent's hands as a process: started at the first file-tool call (forked by the
session's fork server, or as a command without one), one for the session's calls, started
again after it died, ended by a cancel and by the session's end."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from io import FileIO
from pathlib import Path

import pytest

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.confine_command import Confinement
from isoagent.parent.agent.hands import Hands
from isoagent.parent.children.forkserver import ForkServer, running
from isoagent.parent.children.launch import child_environment
from isoagent.parent.children.sandbox_policy import landlock_available, policy_for
from isoagent.parent.settings import Settings
from tests.support.fork_servers import fork_server_on_a_loop
from tests.support.processes import wait_for

pytestmark = pytest.mark.skipif(not landlock_available(), reason="kernel has no Landlock")
NEVER = threading.Event()


@pytest.fixture
def fork_server() -> Iterator[tuple[ForkServer, asyncio.AbstractEventLoop]]:
    with fork_server_on_a_loop() as (server, loop):
        yield server, loop


@pytest.fixture(params=["forked", "command"])
def hands(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    fork_server: tuple[ForkServer, asyncio.AbstractEventLoop],
) -> Iterator[Hands]:
    workspace, temp = tmp_path / "ws", tmp_path / "tmp"
    workspace.mkdir()
    temp.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    settings = Settings(workdir=workspace)
    policy = policy_for(BUILTIN_AGENTS["general-purpose"], settings)
    confinement = Confinement(policy, settings.limits, str(workspace), str(temp))
    opened: list[FileIO] = []

    def log() -> FileIO:
        opened.append(FileIO(tmp_path / "hands.log", "ab"))
        return opened[-1]

    server, loop = fork_server if request.param == "forked" else (None, None)
    made = Hands(confinement, child_environment(str(temp)), log, server, loop)
    made.opened = opened  # type: ignore[attr-defined]
    yield made
    made.close()


def test_a_session_that_calls_no_file_tool_starts_no_hands(hands: Hands) -> None:
    hands.close()
    assert hands.pid == 0 and hands.opened == []  # type: ignore[attr-defined]  # nor its log


def test_calls_run_in_one_process_that_ends_with_the_session(hands: Hands) -> None:
    first = hands.run("Read", {"file_path": "notes.txt"}, NEVER)
    pid = hands.pid
    written = hands.run("Write", {"file_path": "new.txt", "content": "x"}, NEVER)
    assert "hello" in first.text and not first.is_error and not written.is_error
    assert pid and hands.pid == pid  # the same process served both
    hands.close()
    assert hands.pid == 0 and wait_for(lambda: not running(pid), 10)


def test_a_hands_that_died_is_started_again_for_the_next_call(hands: Hands) -> None:
    assert not hands.run("Read", {"file_path": "notes.txt"}, NEVER).is_error
    died = hands.pid
    os.killpg(died, signal.SIGKILL)
    assert wait_for(lambda: not running(died), 10)
    again = hands.run("Read", {"file_path": "notes.txt"}, NEVER)
    assert "hello" in again.text and not again.is_error
    assert hands.pid not in (0, died)


def test_a_cancel_ends_a_call_that_runs_on_and_its_process(hands: Hands, tmp_path: Path) -> None:
    (tmp_path / "ws" / "long.txt").write_text("a" * 40 + "b\n")  # (a+)+$: exponential
    assert not hands.run("Read", {"file_path": "notes.txt"}, NEVER).is_error
    started = hands.pid
    cancelled = threading.Event()
    threading.Timer(1.0, cancelled.set).start()
    out = hands.run("Grep", {"pattern": "(a+)+$", "path": "long.txt"}, cancelled)
    assert out.is_error and "cancelled" in out.text
    assert hands.pid == 0 and wait_for(lambda: not running(started), 10)


def test_a_file_name_that_is_not_utf8_comes_back_replaced(hands: Hands, tmp_path: Path) -> None:
    (tmp_path / "ws" / os.fsdecode(b"caf\xe9.txt")).write_text("x")
    out = hands.run("Glob", {"pattern": "*.txt"}, NEVER)
    assert "caf\ufffd.txt" in out.text and not out.is_error
    assert hands.run("Read", {"file_path": "notes.txt"}, NEVER).text.count("hello") == 1  # alive
