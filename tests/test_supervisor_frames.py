"""The supervisor's reading of a child's frames across its timeout and an interruption."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from isoagent.parent.children.child_run import _finish
from isoagent.parent.children.connection import StderrLog
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer
from tests.support.split_frame_child import SUMMARY


def test_frame_in_flight_when_the_timeout_fires_is_read_whole_and_the_result_kept(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    child = f"{sys.executable} -m tests.support.split_frame_child"
    env = cli_env(api_server, ISOAGENT_CHILD_COMMAND=child)
    args = ["task", "go", "--timeout", "1", "--output-format", "json"]
    done = run_cli(args, env, cwd=tmp_path, timeout=60)

    assert done.returncode == 4, done.stderr
    result = json.loads(done.stdout)  # text mode prints only a run that succeeded
    assert (result["status"], result["result"]) == ("timeout", SUMMARY)
    assert "isoagent: timeout: child timed out after 1 s" in done.stderr
    assert "corrupt" not in done.stderr


def test_interrupt_while_stderr_drains_propagates_and_ends_the_drain(tmp_path: Path) -> None:
    async def scenario() -> asyncio.Task[None]:
        stream = asyncio.StreamReader()  # a grandchild holds the pipe: no EOF, ever
        drain = asyncio.create_task(StderrLog(tmp_path / "child.stderr.log").drain(stream))
        finishing = asyncio.create_task(_finish(drain, seconds=60))
        await asyncio.sleep(0.05)
        finishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await finishing
        return drain

    drain = asyncio.run(scenario())
    assert drain.cancelled()
