"""Finding a child's processes through /proc: by session, by tag, and by age."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isoagent.child.agent.process_tree import TAG_VARIABLE, find_processes, start_time
from tests.support.processes import wait_for

TAG = f"test-proc-{os.getpid()}"


@pytest.fixture
def tagged() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def sleeper(started: list[subprocess.Popen[bytes]], tag: str = TAG) -> subprocess.Popen[bytes]:
    env = {**os.environ, TAG_VARIABLE: tag}
    process = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    started.append(process)
    # exec'd, and its new environment in place (the exe link changes a moment before it)
    tag_entry = f"{TAG_VARIABLE}={tag}".encode()
    assert wait_for(lambda: tag_entry in Path(f"/proc/{process.pid}/environ").read_bytes())
    return process


def test_tagged_processes_are_found_whatever_their_session(
    tagged: list[subprocess.Popen[bytes]],
) -> None:
    first, second = sleeper(tagged), sleeper(tagged)
    sleeper(tagged, tag=TAG + "-other")
    assert sorted(find_processes(tag=TAG)) == sorted([first.pid, second.pid])
    assert find_processes(session=first.pid) == [first.pid]  # it leads its own session


def test_processes_started_before_the_child_are_not_taken_for_what_it_started(
    tagged: list[subprocess.Popen[bytes]],
) -> None:
    older = sleeper(tagged)
    time.sleep(0.05)  # start times count clock ticks (10 ms)
    child = sleeper(tagged, tag="the child itself")
    born = start_time(child.pid)
    assert born > start_time(older.pid) > 0
    newer = sleeper(tagged)
    assert find_processes(tag=TAG, born_after=born) == [newer.pid]
    assert sorted(find_processes(tag=TAG)) == sorted([older.pid, newer.pid])


def test_start_time_of_a_process_that_is_gone_is_unknown() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert start_time(gone.pid) == 0
