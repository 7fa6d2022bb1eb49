"""Background subagents, as Claude Code runs them: a ``task`` call with ``run_in_background``
(or an agent type with ``background: true``) returns the child's id at once, the parent's
model goes on, and the child's end comes back as stream-json's ``task_notification`` and as
a user turn for the model; ``-p`` waits for it before its result; ``stop_task`` ends one.
Real child processes against the test Messages server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import claude_agent_sdk
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.test_print_mode import CLAUDE, ISOAGENT_SCRIPT, needs_claude

CHILD_JOB = "CHILD JOB: compute the answer"


def backgrounding(
    child: Callable[[Request], Reply], *, background: bool | None = True
) -> tuple[Callable[[Request], Reply], threading.Event]:
    """The parent starts one child (``background``: with run_in_background set so), answers
    "parent turn 1" at once, then "parent turn 2" to what comes next; the child plays
    ``child``. The event is set once the parent's second request is made."""
    went_on = threading.Event()

    def handler(req: Request) -> Reply:
        if req.first_user_text.endswith(CHILD_JOB):
            return child(req)
        if req.turn == 0:
            call = {
                "description": "bg job",
                "prompt": CHILD_JOB,
                "subagent_type": "general-purpose",
            }
            if background is not None:
                call["run_in_background"] = background
            return tool_reply("Agent", call)
        went_on.set()
        return text_reply(f"parent turn {req.turn}")

    return handler, went_on


def notifications(server: MessagesServer) -> list[str]:
    """The text blocks of the parent's last request's last user turn."""
    last = [r for r in server.requests if not r.first_user_text.endswith(CHILD_JOB)][-1]
    content = last.messages[-1]["content"]
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]


def launch_results(server: MessagesServer) -> list[dict[str, Any]]:
    """What the parent's Agent call returned: the tool results of its second request."""
    return next(r for r in server.requests if r.turn == 1 and "Agent" in r.tool_names).tool_results


def run_print(server: MessagesServer, tmp_path: Path, workspace: Path) -> list[dict[str, Any]]:
    env = cli_env(server, HOME=str(tmp_path / "home"))
    args = ["-p", "go", "--output-format", "stream-json", "--verbose"]
    done = run_cli(args, env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_background_childs_id_comes_at_once_and_its_end_is_the_models_next_turn(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    parent_first: list[bool] = []

    def child(req: Request) -> Reply:
        parent_first.append(went_on.wait(30))  # the parent's next request, before this ends
        return text_reply("child summary: 42")

    api_server.handler, went_on = backgrounding(child)
    lines = run_print(api_server, tmp_path, workspace)

    assert parent_first == [True]
    (result,) = launch_results(api_server)
    assert not result.get("is_error") and "agentId: 001" in result["content"]
    assert "child summary" not in result["content"]
    (note,) = notifications(api_server)  # the model's user turn: the child's end
    assert "<task-id>001</task-id>" in note and "<status>completed</status>" in note
    assert "<result>child summary: 42</result>" in note and "NOT USER INPUT" in note
    (call,) = [
        b["id"] for m in lines if m["type"] == "assistant" for b in m["message"]["content"]
        if b["type"] == "tool_use"
    ]  # fmt: skip
    (ended,) = [m for m in lines if m.get("subtype") == "task_notification"]
    assert (ended["task_id"], ended["status"], ended["tool_use_id"]) == ("001", "completed", call)
    assert ended["summary"] == "child summary: 42"
    final = lines[-1]  # -p waited for the child, and the model's answer to its end
    assert final["type"] == "result" and final["result"] == "parent turn 2"
    assert [m.get("subtype") for m in lines].index("task_notification") < len(lines) - 1


def test_an_agent_type_with_background_true_runs_its_children_in_the_background(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "general-purpose.md").write_text(
        "---\nname: general-purpose\ndescription: does it\nbackground: true\n---\nDo it.\n"
    )
    api_server.handler, _ = backgrounding(
        lambda req: text_reply("child summary: 7"), background=None
    )
    lines = run_print(api_server, tmp_path, workspace)
    assert "agentId: 001" in launch_results(api_server)[0]["content"]
    assert "<result>child summary: 7</result>" in notifications(api_server)[0]
    assert lines[-1]["result"] == "parent turn 2"


def test_a_child_asked_to_wait_for_is_not_in_the_background(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler, _ = backgrounding(
        lambda req: text_reply("child summary: 9"), background=False
    )
    lines = run_print(api_server, tmp_path, workspace)
    assert launch_results(api_server)[0]["content"].startswith("child summary: 9")
    assert lines[-1]["result"] == "parent turn 1"


def claude_code_or_isoagent(
    command: Path, server: MessagesServer, workspace: Path
) -> tuple[Any, ...]:
    """What one CLI's ``-p`` run of the background script shows."""
    parent_first: list[bool] = []

    def child(req: Request) -> Reply:
        parent_first.append(went_on.wait(30))
        return text_reply("child summary: 42")

    handler, went_on = backgrounding(child)
    server.reset(handler)
    workspace.mkdir()
    env = {
        **cli_env(server, HOME=str(workspace)),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    done = subprocess.run(
        [str(command), "-p", "go", "--output-format", "stream-json", "--verbose"],
        env=env, cwd=workspace, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}: {done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    (ended,) = [m for m in lines if m.get("subtype") == "task_notification"]
    (note,) = [n for n in notifications(server) if "<task-notification>" in n]
    return (
        parent_first,
        ended["status"],
        ended["summary"],
        "<status>completed</status>" in note,
        "<result>child summary: 42</result>" in note,
        [m["result"] for m in lines if m["type"] == "result"][-1],
    )


@needs_claude
def test_background_children_behave_as_in_claude_code(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The same script against Claude Code's CLI and isoagent's: both go on before the child
    ends, wait for it in -p, tell the model in a task-notification user turn, and print a
    completed task_notification with the child's summary."""
    claude = claude_code_or_isoagent(CLAUDE, api_server, tmp_path / "claude")
    isoagent = claude_code_or_isoagent(ISOAGENT_SCRIPT, api_server, tmp_path / "iso")
    expected = ([True], "completed", "child summary: 42", True, True, "parent turn 2")
    assert claude == isoagent == expected


def sleeping_child(req: Request) -> Reply:
    return tool_reply("Bash", {"command": "touch started; sleep 600"})


def task_started(message: Any) -> bool:
    return getattr(message, "subtype", "") == "task_started"


def stopped_through_the_sdk(
    server: MessagesServer,
    workspace: Path,
    when: Callable[[Any], bool],
    act: Callable[[claude_agent_sdk.ClaudeSDKClient, Any], Awaitable[Any]],
    **options: Any,
) -> ResultMessage:
    """isoagent behind the SDK's client (with ``options``), asked "go", its background child
    sleeping: at the first message ``when`` holds for, once the child's command runs, ``act``
    on it; the child must end stopped (stream-json says so). The run's result."""
    sdk_options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(server, HOME=str(workspace.parent)),
        **options,
    )

    async def talk() -> list[Any]:
        messages = []
        async with claude_agent_sdk.ClaudeSDKClient(sdk_options) as client:
            await client.query("go")
            async for message in client.receive_messages():
                messages.append(message)
                if isinstance(message, ResultMessage):
                    break
                if when(message):
                    while not (workspace / "started").exists():
                        await asyncio.sleep(0.05)
                    await act(client, message)
        return messages

    messages = asyncio.run(asyncio.wait_for(talk(), 120))  # the command sleeps 600 s
    (ended,) = [m for m in messages if getattr(m, "subtype", "") == "task_notification"]
    assert ended.data["status"] == "stopped"
    result = messages[-1]
    assert isinstance(result, ResultMessage)
    return result


def test_stop_task_ends_a_background_child_and_the_model_hears_it_stopped(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler, _ = backgrounding(sleeping_child)

    def stop_it(client: claude_agent_sdk.ClaudeSDKClient, started: Any) -> Awaitable[None]:
        return client.stop_task(started.data["task_id"])

    result = stopped_through_the_sdk(api_server, workspace, task_started, stop_it)
    (note,) = notifications(api_server)
    assert "<status>stopped</status>" in note and "stopped (stop_task)" in note
    assert result.result == "parent turn 2"


def test_an_interrupt_while_the_parent_waits_for_a_background_child_ends_both(
    api_server: MessagesServer, workspace: Path
) -> None:
    api_server.handler, _ = backgrounding(sleeping_child)
    result = stopped_through_the_sdk(
        api_server,
        workspace,
        lambda message: "parent turn 1" in str(getattr(message, "content", "")),
        lambda client, message: client.interrupt(),
    )
    assert result.subtype == "error_during_execution"
    assert "parent turn 2" not in str(result.result)


def test_stop_task_ends_a_background_child_still_waiting_for_a_slot(
    api_server: MessagesServer, workspace: Path
) -> None:
    """With one slot, the second of two background children waits: stopped, it never
    starts, and the model hears it stopped."""

    def handler(req: Request) -> Reply:
        if req.first_user_text.endswith(CHILD_JOB):
            return sleeping_child(req)
        if req.turn == 0:
            call = {"description": "bg", "prompt": CHILD_JOB, "subagent_type": "general-purpose"}
            return tools_reply([("Agent", {**call, "run_in_background": True})] * 2)
        return text_reply(f"parent turn {req.turn}")

    async def stop_both(client: claude_agent_sdk.ClaudeSDKClient, message: Any) -> None:
        await client.stop_task("002")  # queued behind 001
        await client.stop_task("001")

    api_server.handler = handler
    one_slot = {"extra_args": {"max-parallel": "1"}}
    result = stopped_through_the_sdk(api_server, workspace, task_started, stop_both, **one_slot)
    assert not result.is_error
    last = [r for r in api_server.requests if not r.first_user_text.endswith(CHILD_JOB)][-1]
    notes = last.text()  # the parent's whole conversation
    for child in ("001", "002"):
        assert f"<task-id>{child}</task-id>\n<output-file>" in notes
    assert notes.count("<status>stopped</status>") == 2
