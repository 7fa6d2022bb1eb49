"""Claude Code's tool vocabulary at the SDK boundary: the tools' names and input schemas
are Claude Code's own (read from the bundled Claude Code's first request), and an app
driving isoagent through the claude-agent-sdk sees them in the stream, in hooks and in
``can_use_tool`` (``test_sdk_options.py``), the same as with Claude Code on the same
scripted server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import AssistantMessage, HookMatcher, ResultMessage, ToolUseBlock

from isoagent.child.agent.tools import TOOL_CLASSES
from isoagent.child.agent.tools.base import ToolContext
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.test_hooks import CLIS, claude_env, talk
from tests.test_print_mode import CLAUDE, ISOAGENT_SCRIPT, env_for, needs_claude

COMPARED = ("Bash", "Read", "Write", "Edit", "Glob", "Grep", "Agent", "SendMessage", "WebFetch")
# what of Claude Code's inputs isoagent does not take (docs/pages/claude-code.md says why)
LEFT_OUT = {
    "Bash": {"run_in_background", "dangerouslyDisableSandbox"},
    "Read": {"pages", "allow_large"},
    "Agent": {"model", "effort", "isolation"},
    "SendMessage": {"notify_when_idle"},
}


def first_request_tools(
    command: list[str], server: MessagesServer, env: dict[str, str], cwd: Path
) -> dict[str, Any]:
    """The input schemas, by tool name, of the first model call of ``command -p``."""
    server.requests.clear()
    done = subprocess.run(
        [*command, "-p", "hi", "--tools", ",".join(COMPARED)],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {t["name"]: t["input_schema"] for t in server.requests[0].body["tools"]}


def _types(schema: dict[str, Any]) -> set[str]:
    """A property's JSON types, an integer counted as the number it is."""
    kinds = {schema["type"]} if "type" in schema else set()
    kinds |= {t for option in schema.get("anyOf", ()) for t in _types(option)}
    if not kinds and "enum" in schema:
        kinds = {type(schema["enum"][0]).__name__.replace("str", "string")}
    return {"number" if kind == "integer" else kind for kind in kinds}


@needs_claude
def test_isoagents_tools_are_claude_codes_by_name_and_input_schema(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Every tool both have: the same name, Claude Code's properties with their types (but
    those LEFT_OUT) and the same required ones."""
    api_server.handler = lambda req: text_reply("ok")
    home = tmp_path / "home"
    home.mkdir()
    # Claude Code defers most tools behind its ToolSearch unless told not to
    env = {**claude_env(api_server, home), "ENABLE_TOOL_SEARCH": "false"}
    claude = first_request_tools([str(CLAUDE)], api_server, env, home)
    assert set(COMPARED) <= set(claude), sorted(claude)
    env = env_for(api_server, tmp_path)
    ours = first_request_tools([str(ISOAGENT_SCRIPT)], api_server, env, home)
    ours["WebFetch"] = TOOL_CLASSES["WebFetch"](ToolContext(home)).spec.input_schema

    assert set(ours) == set(COMPARED)

    for name in COMPARED:
        theirs, mine = claude[name], ours[name]
        assert set(theirs["properties"]) - set(mine["properties"]) == LEFT_OUT.get(name, set())
        assert set(mine["properties"]) <= set(theirs["properties"]), name
        assert sorted(mine.get("required", [])) == sorted(theirs.get("required", [])), name
        for key, prop in mine["properties"].items():
            assert _types(prop) <= _types(theirs["properties"][key]), (name, key)
    grep_modes = ours["Grep"]["properties"]["output_mode"]["enum"]
    assert sorted(grep_modes) == sorted(claude["Grep"]["properties"]["output_mode"]["enum"])


def bash_then_write(workspace: Path, target: str = "made.txt") -> Any:
    """The parent's model runs a Bash command, then writes ``target`` with Write."""

    def handler(req: Request) -> Reply:
        if not req.tool_names:  # Claude Code's side requests (a title, ...)
            return text_reply("ok")
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo hi", "description": "Say hi"})
        if req.turn == 1:
            return tool_reply("Write", {"file_path": str(workspace / target), "content": "x\n"})
        return text_reply("done")

    return handler


def run_sdk(
    cli: str, server: MessagesServer, tmp_path: Path, workspace: Path, **options: Any
) -> list[Any]:
    """One message through the SDK's client to ``cli`` (isoagent or the bundled Claude Code)."""
    if cli == "claude":
        env = claude_env(server, tmp_path / "home")
        return talk(
            "go", workspace, env, CLAUDE, allowed_tools=["Bash", "Write", "Edit"], **options
        )
    return talk("go", workspace, env_for(server, tmp_path), **options)


def tool_uses(messages: list[Any]) -> list[tuple[str, list[str]]]:
    return [
        (block.name, sorted(block.input))
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.content
        if isinstance(block, ToolUseBlock)
    ]


@pytest.mark.parametrize("cli", CLIS)
def test_the_stream_shows_claude_codes_tool_names_and_inputs(
    cli: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """An app that checks ``block.name == "Bash"`` and reads a Write's ``file_path`` works
    unchanged: the same names and input keys from isoagent as from Claude Code."""
    api_server.handler = bash_then_write(workspace)
    messages = run_sdk(cli, api_server, tmp_path, workspace)
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert tool_uses(messages) == [
        ("Bash", ["command", "description"]),
        ("Write", ["content", "file_path"]),
    ]
    assert (workspace / "made.txt").read_text() == "x\n"


def write_guard(heard: list[dict[str, Any]]) -> Any:
    """The SDK's examples/hooks.py guard: a PreToolUse hook on ``Write|Edit`` that reads
    ``tool_input["file_path"]`` and denies a write to a file it protects."""

    async def guard(data: dict[str, Any], tool_use_id: str | None, _context: Any) -> dict[str, Any]:
        heard.append(data)
        if data["tool_name"] in ("Write", "Edit") and "forbidden" in data["tool_input"].get(
            "file_path", ""
        ):
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "that file is protected",
                }
            }
        return {}

    return {"PreToolUse": [HookMatcher(matcher="Write|Edit", hooks=[guard])]}


@pytest.mark.parametrize("cli", CLIS)
def test_a_write_or_edit_guard_reading_file_path_keeps_the_file_unwritten(
    cli: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Before, isoagent's ``write_file`` with ``path`` matched no ``Write|Edit`` guard and
    the file was written; now the guard hears Claude Code's input and the write is denied:
    the model reads the reason, the file is not there."""
    api_server.handler = bash_then_write(workspace, "forbidden.txt")
    heard: list[dict[str, Any]] = []
    messages = run_sdk(cli, api_server, tmp_path, workspace, hooks=write_guard(heard))
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert not (workspace / "forbidden.txt").exists()
    [write] = heard  # the Bash call is no business of this matcher
    assert (write["tool_name"], write["tool_input"]["file_path"]) == (
        "Write",
        str(workspace / "forbidden.txt"),
    )
    refused = [r for r in api_server.requests if r.turn == 2][-1].tool_results[0]
    assert refused["is_error"] and "that file is protected" in json.dumps(refused["content"])


CHILD_JOB = "write the file"


def delegated_write(workspace: Path) -> Any:
    """The parent delegates (in the foreground) to general-purpose, whose model writes
    ``forbidden.txt`` with Write."""

    def handler(req: Request) -> Reply:
        if not req.tool_names:
            return text_reply("ok")
        if CHILD_JOB in req.first_user_text:
            if req.turn == 0:
                path = str(workspace / "forbidden.txt")
                return tool_reply("Write", {"file_path": path, "content": "x\n"})
            return text_reply(f"child saw: {json.dumps(req.tool_results[0]['content'])}")
        if req.turn == 0:
            task = {"description": "write it", "prompt": CHILD_JOB,
                    "subagent_type": "general-purpose", "run_in_background": False}  # fmt: skip
            return tool_reply("Agent", task)
        return text_reply("parent done")

    return handler


@pytest.mark.parametrize("cli", CLIS)
def test_a_childs_write_reaches_the_guard_by_the_same_name_and_is_denied(
    cli: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A child's tool calls go through the parent's hooks under Claude Code's names too,
    with the child's agent id and type, and its denied write is not made."""
    api_server.handler = delegated_write(workspace)
    heard: list[dict[str, Any]] = []
    options: dict[str, Any] = {"hooks": write_guard(heard)}
    if cli == "claude":
        env = claude_env(api_server, tmp_path / "home")
        messages = talk("go", workspace, env, CLAUDE, allowed_tools=["Write", "Agent"], **options)
    else:
        messages = talk("go", workspace, env_for(api_server, tmp_path), **options)
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert not (workspace / "forbidden.txt").exists()
    [write] = heard
    assert write["tool_name"] == "Write" and write["tool_input"]["file_path"].endswith(
        "forbidden.txt"
    )
    assert write["agent_type"] == "general-purpose" and write["agent_id"]
    assert [t for t in tool_uses(messages) if t[0] == "Write"] == [
        ("Write", ["content", "file_path"])
    ]


@pytest.mark.parametrize(
    ("flag", "value", "new"),
    [("--allowedTools", "read_file Bash(git:*)", "Read"), ("--disallowedTools", "task", "Agent"),
     ("--tools", "bash,Read", "Bash")],
)  # fmt: skip
def test_a_flag_naming_a_tool_by_isoagents_old_name_is_one_line_with_the_name_to_use(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, flag: str, value: str, new: str
) -> None:
    """A rule meant to allow or keep away a tool must not miss it: refused before any call."""
    done = run_cli(["-p", "hi", flag, value], env_for(api_server, tmp_path), cwd=workspace)
    old = value.split(",")[0].split()[0]
    assert done.returncode == 2 and api_server.requests == []
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"isoagent: {flag} names {old!r}: did you mean {new}? (tools go by Claude Code's names)"
    )
