"""``-p --dangerously-skip-permissions`` (in most ``claude -p`` scripts) means what it means
in Claude Code: no tool call is asked about (``bypassPermissions``), said once, and the
sandbox still holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from isoagent.parent.children.sandbox_policy import landlock_available
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


@pytest.mark.skipif(not landlock_available(), reason="the parent's bash is confined by Landlock")
def test_skip_permissions_lets_the_parent_act_and_its_bash_stays_confined(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    outside = tmp_path / "outside.txt"

    def handler(req: Request) -> Reply:
        if not req.tool_results:
            command = f"echo made > made.txt; echo escaped > {outside}"
            return tool_reply("Bash", {"command": command})
        return text_reply("done")

    api_server.handler = handler
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    rules = ["--allowedTools", "Read"]
    asked = run_cli(["-p", "go", *rules], env, cwd=workspace)  # nobody to ask: no bash
    assert asked.returncode == 0, asked.stderr
    assert not (workspace / "made.txt").exists()

    args = ["-p", "go", *rules, "--dangerously-skip-permissions"]
    done = run_cli(args, env, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("--dangerously-skip-permissions: no tool call is asked about") == 1
    assert (workspace / "made.txt").read_text() == "made\n"
    assert not outside.exists()  # the parent's bash is confined to the workspace


def test_skip_permissions_with_another_permission_mode_is_refused_by_name(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    args = ["-p", "go", "--dangerously-skip-permissions", "--permission-mode", "plan"]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path / "home")), cwd=workspace)
    assert done.returncode == 2
    assert "cannot go with --permission-mode plan" in done.stderr
    assert api_server.requests == []
