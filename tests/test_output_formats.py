"""``--output-format text|json|stream-json`` of ``run`` and ``task``: Claude Code's shapes,
read by the claude-agent-sdk's own parser."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    SystemMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TextBlock,
    ToolUseBlock,
    UserMessage,
)
from claude_agent_sdk._internal.message_parser import parse_message

from tests.conftest import cli_env
from tests.support.cli import ISOAGENT, run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

# each command runs in-process, then through the warm daemon: the same output and exit codes
pytestmark = pytest.mark.usefixtures("both_paths")


def delegating(req: Request) -> Reply:
    """The parent hands one task to an Explore child, then answers with its summary."""
    if req.is_parent:
        if req.turn == 0:
            return tool_reply(
                "Agent",
                {"description": "look around", "prompt": "list files", "subagent_type": "Explore"},
                text="Delegating.",
            )
        return text_reply("Final answer: " + req.tool_results[0]["content"].splitlines()[0])
    if req.turn == 0:
        return tool_reply("Glob", {"pattern": "*"})
    return text_reply("one file: a.txt")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    return path


def run(server: MessagesServer, args: list[str], workspace: Path) -> subprocess.CompletedProcess:
    server.handler = delegating
    done = run_cli([*args, "-C", str(workspace)], cli_env(server), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    return done


def test_text_prints_only_the_answer(api_server: MessagesServer, workspace: Path) -> None:
    done = run(api_server, ["run", "what is here?"], workspace)
    assert done.stdout == "Final answer: one file: a.txt\n"
    assert "[Explore] look around" in done.stderr  # progress stays on stderr


def test_json_prints_claude_codes_result_object_with_isoagents_facts_added(
    api_server: MessagesServer, workspace: Path
) -> None:
    done = run(api_server, ["run", "what is here?", "--output-format", "json"], workspace)
    assert len(done.stdout.splitlines()) == 1
    final = json.loads(done.stdout)
    parsed = parse_message(final)
    assert isinstance(parsed, ResultMessage)
    assert (parsed.subtype, parsed.is_error, parsed.num_turns) == ("success", False, 2)
    assert parsed.result == "Final answer: one file: a.txt"
    assert parsed.usage is not None and parsed.usage["input_tokens"] == 20
    assert parsed.duration_ms > 0 and parsed.duration_api_ms > 0
    assert parsed.session_id and (workspace / final["run_dir"]).is_dir()
    # parent 2 calls + child 2 calls of (10, 5) tokens on claude-sonnet-5 at $2/$10 per M
    assert parsed.total_cost_usd == pytest.approx((40 * 2 + 20 * 10) / 1e6)
    assert final["status"] == "ok"
    [child] = final["children"]
    assert child["agent"] == "Explore" and child["description"] == "look around"
    assert child["result"]["summary"] == "one file: a.txt" and child["result"]["tool_calls"] == 1
    assert (workspace / child["transcript"]).is_file()


def stream(api_server: MessagesServer, args: list[str], workspace: Path) -> list[dict[str, Any]]:
    done = run(api_server, [*args, "--output-format", "stream-json", "--verbose"], workspace)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_stream_json_is_claude_codes_stream_and_the_sdk_parses_every_line(
    api_server: MessagesServer, workspace: Path
) -> None:
    lines = stream(api_server, ["run", "what is here?"], workspace)
    messages = [parse_message(line) for line in lines]
    assert None not in messages  # every line is a message type the SDK knows
    init, *middle, result = messages
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert init.data["cwd"] == str(workspace) and "Agent" in init.data["tools"]
    assert "Explore" in init.data["agents"]
    session = init.data["session_id"]
    assert isinstance(result, ResultMessage) and result.session_id == session
    assert result.result == "Final answer: one file: a.txt"

    kinds = [type(m).__name__ for m in middle]
    assert kinds == [
        "AssistantMessage",  # parent: "Delegating." + Agent call
        "TaskStartedMessage",
        "AssistantMessage",  # child: Glob call
        "TaskProgressMessage",  # turn 1 done
        "TaskProgressMessage",  # Glob started
        "TaskProgressMessage",  # Glob done
        "UserMessage",  # child: Glob result
        "AssistantMessage",  # child: its summary
        "TaskProgressMessage",  # turn 2 done
        "TaskNotificationMessage",
        "UserMessage",  # parent: the Agent result
        "AssistantMessage",  # parent: the answer
    ], "\n".join(kinds)
    first = middle[0]
    assert isinstance(first, AssistantMessage) and first.parent_tool_use_id is None
    assert isinstance(first.content[0], TextBlock) and first.content[0].text == "Delegating."
    task_call = first.content[1]
    assert isinstance(task_call, ToolUseBlock) and task_call.name == "Agent"
    started, notified = middle[1], middle[9]
    assert isinstance(started, TaskStartedMessage) and started.tool_use_id == task_call.id
    assert started.description == "look around" and started.task_type == "local_agent"
    assert isinstance(notified, TaskNotificationMessage)
    assert (notified.status, notified.summary) == ("completed", "one file: a.txt")
    assert (workspace / notified.output_file).is_file()
    # the child's own turns are in the stream, tagged with the task call that started it
    for child_message in middle[2], middle[6], middle[7]:
        assert isinstance(child_message, AssistantMessage | UserMessage)
        assert child_message.parent_tool_use_id == task_call.id
    last = middle[-1]
    assert isinstance(last, AssistantMessage) and last.parent_tool_use_id is None
    assert {line["session_id"] for line in lines} == {session}


def test_a_failed_run_is_an_error_result(api_server: MessagesServer, workspace: Path) -> None:
    api_server.handler = lambda req: tool_reply("Glob", {"pattern": "*"})
    args = ["run", "loop", "--max-turns", "1", "-C", str(workspace), "--output-format", "json"]
    done = run_cli(args, cli_env(api_server), cwd=workspace, input="")
    assert done.returncode != 0
    parsed = parse_message(json.loads(done.stdout))
    assert isinstance(parsed, ResultMessage)
    assert (parsed.subtype, parsed.is_error) == ("error_max_turns", True)
    assert parsed.errors and "maximum number of turns" in parsed.errors[0]


def test_task_json_and_stream_json(api_server: MessagesServer, workspace: Path) -> None:
    api_server.handler = lambda req: text_reply("summary only")
    env = cli_env(api_server)
    args = ["task", "go", "-C", str(workspace), "--output-format"]
    done = run_cli([*args, "json"], env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["result"] == "summary only"
    assert [c["result"]["summary"] for c in final["children"]] == ["summary only"]

    done = run_cli([*args, "stream-json"], env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    messages = [parse_message(json.loads(line)) for line in done.stdout.splitlines()]
    kinds = [type(m).__name__ for m in messages]
    assert kinds[0] == "SystemMessage" and kinds[1] == "TaskStartedMessage"
    init = messages[0]
    assert isinstance(init, SystemMessage)
    assert init.data["tools"] == ["Bash", "Read", "Write", "Edit", "Glob", "Grep"]

    assert kinds[-2:] == ["TaskNotificationMessage", "ResultMessage"]
    [answer] = [m for m in messages if isinstance(m, AssistantMessage)]
    assert answer.parent_tool_use_id is None  # no parent: the child is the main agent


def test_stream_json_into_a_closed_pipe_ends_quietly_with_141(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply("x" * 100_000)
    command = shlex.join([*ISOAGENT, "task", "go", "--output-format", "stream-json"])
    done = subprocess.run(
        ["bash", "-c", f"{command} | head -c 10; s=${{PIPESTATUS[0]}}; echo; echo status $s"],
        env=cli_env(api_server),
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith('{"type":"s')
    assert done.stdout.endswith("status 141\n")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
