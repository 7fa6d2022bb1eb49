"""Continuing a finished subagent (Claude Code's SendMessage): ``SendMessage`` runs a new

child process of the same agent type on the ended child's whole conversation, as the parent
wrote it, with the message as its next prompt; only the summary comes back."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply


def test_a_finished_child_goes_on_with_its_context_in_a_process_of_its_own(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"description": "keep", "prompt": "remember zebra", "subagent_type": "Explore"}
            return tool_reply("Agent", task)
        if req.is_parent and req.turn == 1:
            agent = re.search(r"agentId (\w+)", str(req.tool_results[0]["content"]))
            assert agent, req.tool_results
            return tool_reply("SendMessage", {"to": agent[1], "message": "which word?"})
        if req.is_parent:
            return text_reply(str(req.tool_results[0]["content"]).split("\n")[0])
        if "which word?" in req.text():  # the continued child: its first conversation is there
            return text_reply("zebra" if "remember zebra" in req.text() else "no idea")
        return text_reply("noted")

    api_server.handler = handler
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "zebra\n"
    _, second = [r for r in api_server.requests if not r.is_parent]
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    run = next((tmp_path / ".isoagent" / "runs").iterdir())
    events = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]
    finished = [e for e in events if e["type"] == "child_result"]
    assert [f["child"] for f in finished] == ["001", "002"]  # two processes, two transcripts
    assert finished[0]["pid"] != finished[1]["pid"]


def test_sending_to_an_agent_that_never_was_is_a_tool_error_the_model_reads(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("SendMessage", {"to": "042", "message": "hello?"})
        return text_reply(str(req.tool_results[0]["content"]))

    api_server.handler = handler
    done = run_cli(["run", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "agentId '042' is no subagent of this run that has ended\n"
