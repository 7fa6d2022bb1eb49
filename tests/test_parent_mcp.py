"""MCP tools for the main agent, through the SDK, side by side with Claude Code's CLI on the
same scripted server: the parent is offered every tool of the session's servers, a call
runs when ``allowed_tools`` grants it and is refused otherwise, and the parent's stdio
server runs under the sandbox of the parent's own commands."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest

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
from tests.support.processes import running, wait_for
from tests.test_mcp_servers import lookup_server, sdk_calc
from tests.test_print_mode import CLAUDE, needs_claude
from tests.test_sdk_options import ISOAGENT_SCRIPT

CLIS = [
    pytest.param(ISOAGENT_SCRIPT, id="isoagent"),
    pytest.param(CLAUDE, id="claude", marks=needs_claude),
]


def calls(tool: str, arguments: dict[str, Any]) -> object:
    """A main agent that calls ``tool`` when it is offered and answers with its result
    (``-`` when it is not)."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply(tool, arguments) if tool in req.tool_names else text_reply("-")
        [result] = req.tool_results
        return text_reply(f"{'error: ' if result.get('is_error') else ''}{result['content']}")

    return handler


def sdk_options(
    cli: Path, server: MessagesServer, workspace: Path, **options: Any
) -> claude_agent_sdk.ClaudeAgentOptions:
    """``options`` for ``cli`` in ``workspace``, its model ``server``."""
    env = cli_env(server, HOME=str(workspace))
    # Claude Code defers MCP tools behind a search tool (ToolSearch) by default: off, they
    # are offered in the request as isoagent offers them
    env |= {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "ENABLE_TOOL_SEARCH": "false"}
    return claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(cli), cwd=str(workspace), env=env, **options
    )


def ask(cli: Path, server: MessagesServer, workspace: Path, **options: Any) -> list[Any]:
    """The messages of ``query("go")`` through the SDK and ``cli``, with ``options``."""
    settings = sdk_options(cli, server, workspace, **options)

    async def talk() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt="go", options=settings)]

    return asyncio.run(asyncio.wait_for(talk(), 120))


def answer(messages: list[Any]) -> Any:
    result = messages[-1]
    assert isinstance(result, claude_agent_sdk.ResultMessage), messages
    return result


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    "grants",
    [
        {"allowed_tools": ["mcp__calc__add"]},
        {"allowed_tools": ["mcp__calc"]},
        {"allowed_tools": ["mcp__calc__*"]},
        {"allowed_tools": ["mcp__calc__add"], "tools": ["Read"]},  # --tools: built-ins only
    ],
    ids=["tool", "server", "wildcard", "tools-option"],
)
def test_the_main_agent_calls_an_sdk_servers_tool_that_allowed_tools_grants(
    api_server: MessagesServer, tmp_path: Path, cli: Path, grants: dict[str, Any]
) -> None:
    api_server.handler = calls("mcp__calc__add", {"a": 2, "b": 3})  # type: ignore[assignment]
    messages = ask(cli, api_server, tmp_path, mcp_servers={"calc": sdk_calc()}, **grants)
    result = answer(messages)
    assert "sum 5" in str(result.result) and "error" not in str(result.result)
    assert result.permission_denials == []


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    "grants",
    [
        {},
        {"allowed_tools": ["mcp__calc__add"]},
        {"allowed_tools": ["mcp__calc"], "permission_mode": "plan"},
    ],
    ids=["no-grant", "other-tool", "plan-mode"],
)
def test_the_main_agent_is_offered_an_mcp_tool_not_granted_but_its_call_is_refused(
    api_server: MessagesServer, tmp_path: Path, cli: Path, grants: dict[str, Any]
) -> None:
    """As in Claude Code's ``-p``: an MCP tool needs a permission, nobody can be asked
    (no ``can_use_tool``), so the call is refused and said in ``permission_denials``; in
    plan mode a granted one is refused too."""
    secrets: list[str] = []
    api_server.handler = calls("mcp__calc__secret", {})  # type: ignore[assignment]
    messages = ask(cli, api_server, tmp_path, mcp_servers={"calc": sdk_calc(secrets)}, **grants)
    result = answer(messages)
    assert secrets == []  # the SDK's tool never ran
    assert str(result.result).startswith("error: ")  # the model read a refusal
    assert [d["tool_name"] for d in result.permission_denials] == ["mcp__calc__secret"]


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    ("denied", "offered"),
    [
        ("mcp__calc__secret", ["mcp__calc__add", "mcp__more__add", "mcp__more__secret"]),
        ("mcp__calc", ["mcp__more__add", "mcp__more__secret"]),
        ("mcp__calc__*", ["mcp__more__add", "mcp__more__secret"]),
    ],
)
def test_an_mcp_tool_disallowed_tools_names_is_not_offered_to_the_main_agent(
    api_server: MessagesServer, tmp_path: Path, cli: Path, denied: str, offered: list[str]
) -> None:
    api_server.handler = calls("mcp__calc__secret", {})  # type: ignore[assignment]
    ask(
        cli,
        api_server,
        tmp_path,
        mcp_servers={"calc": sdk_calc(), "more": sdk_calc()},
        allowed_tools=["mcp__calc", "mcp__more"],  # whole servers, but what is disallowed
        disallowed_tools=[denied],
    )
    [request] = api_server.requests
    assert sorted(name for name in request.tool_names if name.startswith("mcp__")) == offered


@pytest.mark.parametrize("cli", CLIS)
def test_the_main_agent_calls_a_stdio_servers_tool(
    api_server: MessagesServer, tmp_path: Path, cli: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    server = {"type": "stdio", **lookup_server(outside)}
    api_server.handler = calls("mcp__ctx__lookup", {"key": "k1"})  # type: ignore[assignment]
    messages = ask(
        cli, api_server, tmp_path, mcp_servers={"ctx": server}, allowed_tools=["mcp__ctx__*"]
    )
    assert "value of k1" in str(answer(messages).result)


def test_the_main_agents_stdio_server_runs_in_its_commands_sandbox_and_ends_with_it(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """The server gets a writing child's sandbox, as the parent's bash does: it cannot
    write outside the workspace (Claude Code's writes there); it gets their environment,
    without the API key; it ends with the turn."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    server = {"type": "stdio", **lookup_server(outside)}
    api_server.handler = calls("mcp__ctx__lookup", {"key": "k1"})  # type: ignore[assignment]
    messages = ask(
        ISOAGENT_SCRIPT,
        api_server,
        workspace,
        mcp_servers={"ctx": server},
        allowed_tools=["mcp__ctx__lookup"],
    )
    text = str(answer(messages).result)
    assert "value of k1" in text and "outside refused" in text and "api key none" in text
    assert not list(outside.iterdir())
    assert list(workspace.glob("started-*"))  # it may write in the workspace
    command = [server["command"], *server["args"]]  # type: ignore[list-item]
    assert wait_for(lambda: not running(*command), 10)  # its pid is its namespace's


@pytest.mark.filterwarnings("ignore:can_use_tool will not be invoked for")  # what is tested
@pytest.mark.parametrize("cli", CLIS)
def test_can_use_tool_is_asked_about_the_main_agents_mcp_calls_allowed_tools_does_not_grant(
    api_server: MessagesServer, tmp_path: Path, cli: Path
) -> None:
    secrets: list[str] = []

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tools_reply([("mcp__calc__add", {"a": 2, "b": 3}), ("mcp__calc__secret", {})])
        return text_reply(str([r["content"] for r in req.tool_results]))

    api_server.handler = handler
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], _context: Any) -> Any:
        asked.append((name, tool_input))
        return claude_agent_sdk.PermissionResultDeny(message="no secrets today")

    options = sdk_options(
        cli,
        api_server,
        tmp_path,
        mcp_servers={"calc": sdk_calc(secrets)},
        allowed_tools=["mcp__calc__add"],
        can_use_tool=can_use_tool,
    )

    async def talk() -> list[Any]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            return [m async for m in client.receive_response()]

    result = answer(asyncio.run(asyncio.wait_for(talk(), 120)))
    assert asked == [("mcp__calc__secret", {})] and secrets == []
    assert "sum 5" in str(result.result) and "no secrets today" in str(result.result)
    assert [d["tool_name"] for d in result.permission_denials] == ["mcp__calc__secret"]


def test_a_server_the_main_agent_cannot_use_is_named_and_its_run_goes_on(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """An http server, with network for the children: the parent process would reach it
    past the egress proxy, so it is failed for the parent, unreached (a subagent gets it);
    a stdio server that does not start is named too. The parent runs with those that work."""
    outside = tmp_path / "outside"
    outside.mkdir()
    servers = {
        "web": {"type": "http", "url": "http://127.0.0.2:9/mcp"},
        "broken": {"command": str(tmp_path / "no-such-server")},
        "ctx": lookup_server(outside),
    }
    api_server.handler = calls("mcp__ctx__lookup", {"key": "k1"})  # type: ignore[assignment]
    args = ["-p", "go", "--mcp-config", json.dumps({"mcpServers": servers})]
    args += ["--allowedTools", "mcp__ctx", "--allowed-domains", "127.0.0.2"]
    args += ["--allow-local-fetch", "127.0.0.2"]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path)), cwd=tmp_path, input="")
    assert done.returncode == 0, done.stderr
    assert "value of k1" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "MCP server" in line]
    assert len(warnings) == 2, done.stderr
    assert "MCP server 'web' failed: the parent agent reaches no http or sse server" in (
        done.stderr
    )
    assert "MCP server 'broken' did not start" in done.stderr
    [first, _] = api_server.requests
    assert [name for name in first.tool_names if name.startswith("mcp__")] == ["mcp__ctx__lookup"]


@pytest.mark.parametrize("cli", CLIS)
def test_a_server_toggled_off_is_no_longer_offered_to_the_main_agent(
    api_server: MessagesServer, tmp_path: Path, cli: Path
) -> None:
    options = sdk_options(cli, api_server, tmp_path, mcp_servers={"calc": sdk_calc()})

    async def talk() -> None:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("first")
            _ = [m async for m in client.receive_response()]
            await client.toggle_mcp_server("calc", False)
            await client.query("second")
            _ = [m async for m in client.receive_response()]

    asyncio.run(asyncio.wait_for(talk(), 120))
    first, second = (
        [n for n in r.tool_names if n.startswith("mcp__")] for r in api_server.requests
    )
    assert (first, second) == (["mcp__calc__add", "mcp__calc__secret"], [])


@pytest.mark.parametrize("cli", CLIS)
def test_a_server_whose_command_fails_is_failed_in_mcp_status_and_one_that_starts_connected(
    cli: Path, api_server: MessagesServer, tmp_path: Path
) -> None:
    """As Claude Code shows them once the session has started its servers (the parent's
    turn starts them in isoagent); the run goes on."""
    api_server.handler = lambda req: text_reply("fine")
    (tmp_path / "outside").mkdir()
    servers = {"ctx": lookup_server(tmp_path / "outside"), "broken": {"command": "/no/such"}}
    settings = sdk_options(cli, api_server, tmp_path, mcp_servers=servers)

    async def talk() -> tuple[dict[str, str], Any]:
        async with claude_agent_sdk.ClaudeSDKClient(settings) as client:
            await client.query("go")
            messages = [m async for m in client.receive_response()]
            status = await client.get_mcp_status()
        return {s["name"]: s["status"] for s in status["mcpServers"]}, messages[-1]

    status, result = asyncio.run(asyncio.wait_for(talk(), 120))
    assert status == {"ctx": "connected", "broken": "failed"}
    assert isinstance(result, claude_agent_sdk.ResultMessage) and result.result == "fine"
