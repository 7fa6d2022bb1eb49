"""Ctrl-C and SIGTERM end every child and grandchild, and say where the transcripts are."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.cli import start_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import alive, wait_for


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_cli_leaves_no_child_or_grandchild_alive(
    api_server: MessagesServer, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    pids = tmp_path / "pids"
    command = f"echo $PPID > {pids}.child; sleep 300 & echo $! > {pids}.bg; sleep 300"

    def handler(req: Request) -> Reply:
        if req.is_parent:
            return tool_reply(
                "task",
                {"description": "hang", "prompt": "hang", "subagent_type": "general-purpose"},
            )
        if req.turn == 0:
            return tool_reply("bash", {"command": command})
        return text_reply("unreachable")

    api_server.handler = handler
    cli = start_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    bg = Path(f"{pids}.bg")
    assert wait_for(lambda: bg.exists() and bg.read_text().strip() != "", 30)
    child_pid = int(Path(f"{pids}.child").read_text())
    grandchild_pid = int(bg.read_text())
    assert alive(child_pid) and alive(grandchild_pid)

    cli.send_signal(sig)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == code
    assert "interrupted; transcripts so far are in .isoagent/runs/" in stderr
    assert "Traceback" not in stderr
    assert wait_for(lambda: not alive(child_pid) and not alive(grandchild_pid), 5)
