"""The Python API from any thread and inside a caller's event loop: it leaves the caller's
signal handlers as they were, and Ctrl-C reaches the caller as ``KeyboardInterrupt`` once
every child is ended."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import isoagent
from tests.conftest import cli_env
from tests.support.api_env import use_server
from tests.support.cli import started_children
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import alive, running, wait_for

REPO = Path(__file__).parents[1]
SLEEP = f"300.{secrets.randbelow(10**9)}"  # the background job's: found by it from here
HANG = f"sleep {SLEEP} & touch started; wait"


def hang_or_answer(req: Request) -> Reply:
    """``hang``: a command that never ends; anything else: an answer."""
    if req.first_user_text == "hang" and req.turn == 0:
        return tool_reply("Bash", {"command": HANG})
    return text_reply("done")


def test_task_runs_from_eight_threads_at_once(
    api_server: MessagesServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_server(monkeypatch, api_server, workspace.parent / "home")
    results: list[object] = []

    def one() -> None:
        try:
            results.append(isoagent.task("x", workdir=workspace).status)
        except BaseException as exc:  # what went wrong is the assertion's
            results.append(repr(exc))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == ["ok"] * 8


def test_asyncio_run_of_atask_inside_a_thread(
    api_server: MessagesServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    use_server(monkeypatch, api_server, workspace.parent / "home")
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(asyncio.run, isoagent.atask("x", workdir=workspace)).result(120)
    assert result.status == "ok"


@pytest.mark.parametrize("app", ["sync", "async"])
def test_the_apps_handlers_stay_and_ctrl_c_is_keyboard_interrupt_with_no_child_left(
    api_server: MessagesServer, workspace: Path, app: str
) -> None:
    api_server.handler = hang_or_answer
    app_process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.api_apps", app, str(workspace)],
        env=cli_env(api_server),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for((workspace / "started").exists, 60)
        [child] = [pid for pid in started_children(workspace) if alive(pid)]  # the hanging one
        # the shell touched the file as soon as it forked the job, maybe before its exec
        assert wait_for(lambda: running("sleep", SLEEP), 60)
        [grandchild] = running("sleep", SLEEP)
        app_process.send_signal(signal.SIGINT)
        stdout, stderr = app_process.communicate(timeout=60)
    finally:
        if app_process.poll() is None:
            app_process.kill()
    expected = {
        "sync": ["ok", "handler kept", "wakeup fd -1", "SIGTERM handled", "KeyboardInterrupt"],
        "async": ["ok", "SIGTERM handled", "KeyboardInterrupt"],
    }[app]
    assert stdout.splitlines() == expected, stderr
    assert app_process.returncode == 0, stderr
    # ended before the caller saw KeyboardInterrupt: no waiting here
    assert not alive(child) and not alive(grandchild)
