"""A run's token budget is kept by the gateway: past it, every agent ends with status budget."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


def test_budget_ends_child_and_parent_with_status_budget(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"description": "spend", "prompt": "spend", "subagent_type": "Explore"}
            return tool_reply("Agent", task, usage=(10, 5))
        if req.is_parent:
            return text_reply("never: the budget is gone", usage=(10, 5))
        return tool_reply("Bash", {"command": "echo more"}, usage=(10, 5))

    api_server.handler = handler
    args = ["run", "go", "--max-tokens-total", "40", "--output-format", "json"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    final = json.loads(done.stdout)
    assert final["status"] == "budget" and final["is_error"] is True
    (child,) = final["children"]
    assert child["result"]["status"] == "budget"
    assert "token budget (40)" in child["result"]["error"]
    assert len(api_server.requests) == 3  # parent, child, child; then refused
    assert "budget" in done.stderr
