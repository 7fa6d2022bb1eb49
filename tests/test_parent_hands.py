"""The parent's hands as a process: started at the first file-tool call, one for the
session's calls, started again after it died, ended by a cancel and by the session's end."""

from __future__ import annotations

import os
import signal
import threading
from io import FileIO
from pathlib import Path

import pytest

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.confine_command import Confinement
from isoagent.parent.agent.hands import HANDS_COMMAND, Hands
from isoagent.parent.children.launch import child_environment
from isoagent.parent.children.sandbox_policy import landlock_available, policy_for
from isoagent.parent.settings import Settings
from tests.support.processes import running, wait_for

pytestmark = pytest.mark.skipif(not landlock_available(), reason="kernel has no Landlock")


@pytest.fixture
def hands(tmp_path: Path) -> Hands:
    workspace, temp = tmp_path / "ws", tmp_path / "tmp"
    workspace.mkdir()
    temp.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    policy = policy_for(BUILTIN_AGENTS["general-purpose"], Settings(workdir=workspace))
    confinement = Confinement(policy, Settings(workdir=workspace).limits, str(workspace), str(temp))
    opened: list[FileIO] = []

    def log() -> FileIO:
        opened.append(FileIO(tmp_path / "hands.log", "wb"))
        return opened[-1]

    made = Hands(confinement, child_environment(str(temp)), log)
    made.opened = opened  # type: ignore[attr-defined]
    return made


def alive_hands(hands: Hands) -> list[int]:
    return running(*HANDS_COMMAND, hands.spec)


def test_a_session_that_calls_no_file_tool_starts_no_hands(hands: Hands) -> None:
    hands.close()
    assert hands.opened == []  # type: ignore[attr-defined]  # nor its log


def test_calls_run_in_one_process_that_ends_with_the_session(hands: Hands) -> None:
    never = threading.Event()
    first = hands.run("read_file", {"path": "notes.txt"}, never)
    started = alive_hands(hands)
    written = hands.run("write_file", {"path": "new.txt", "content": "x"}, never)
    assert "hello" in first.text and not first.is_error and not written.is_error
    assert started and alive_hands(hands) == started  # the same process served both
    hands.close()
    assert wait_for(lambda: not alive_hands(hands), 10)


def test_a_hands_that_died_is_started_again_for_the_next_call(hands: Hands) -> None:
    never = threading.Event()
    assert not hands.run("read_file", {"path": "notes.txt"}, never).is_error
    for pid in alive_hands(hands):
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not alive_hands(hands), 10)
    again = hands.run("read_file", {"path": "notes.txt"}, never)
    assert "hello" in again.text and not again.is_error
    hands.close()


def test_a_cancel_ends_a_call_that_runs_on_and_its_process(hands: Hands, tmp_path: Path) -> None:
    (tmp_path / "ws" / "long.txt").write_text("a" * 40 + "b\n")  # (a+)+$: exponential
    cancelled = threading.Event()
    threading.Timer(1.0, cancelled.set).start()
    out = hands.run("grep", {"pattern": "(a+)+$", "path": "long.txt"}, cancelled)
    assert out.is_error and "cancelled" in out.text
    assert wait_for(lambda: not alive_hands(hands), 10)
    hands.close()
