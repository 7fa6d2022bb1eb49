"""MCP servers for subagents: an agent whose tools name a server's tool gets it; the child
starts the server inside its own sandbox and nothing of it outlives the child."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest

from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.processes import running, wait_for
from tests.test_print_mode import CLAUDE, needs_claude
from tests.test_sdk_options import ISOAGENT_SCRIPT, sdk_args

REPO = Path(__file__).resolve().parent.parent
AGENT = "---\nname: ctx-user\ndescription: Looks keys up.\ntools: {tools}\n---\nLook keys up.\n"


def add_agent(workspace: Path, tools: str) -> None:
    """The agent ``ctx-user`` with ``tools``, in ``workspace``'s agent files."""
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "ctx-user.md").write_text(AGENT.format(tools=tools))


def delegate(agent: str) -> object:
    """A parent that hands ``look k1`` to ``agent``, whose child calls mcp__ctx__lookup
    when it has it and answers with what it got."""

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                task = {"description": "look", "prompt": "look k1", "subagent_type": agent}
                return tool_reply("Agent", task)
            return text_reply("done")
        if req.turn == 0 and "mcp__ctx__lookup" in req.tool_names:
            return tool_reply("mcp__ctx__lookup", {"key": "k1"})
        results = req.tool_results
        return text_reply(results[0]["content"] if results else "no tool")

    return handler


def delegate_in_turn(*agents: str) -> object:
    """A parent that hands ``look k1`` to each of ``agents`` in turn; children as in
    ``delegate``."""
    to_child = delegate(agents[0])

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn < len(agents):
            task = {"description": "look", "prompt": "look k1", "subagent_type": agents[req.turn]}
            return tool_reply("Agent", task)
        return to_child(req)  # type: ignore[operator, no-any-return]

    return handler


@pytest.fixture
def workspace_with_server(tmp_path: Path) -> Path:
    """A workspace whose .mcp.json names the lookup server, and a folder outside it."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    server = {"command": sys.executable, "args": ["-m", "tests.support.mcp_lookup_server"]}
    server["args"].append(str(outside))
    server["env"] = {"PYTHONPATH": str(REPO)}
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {"ctx": server}}))
    return ws


def child_requests(server: MessagesServer) -> list[Request]:
    return [r for r in server.requests if not r.is_parent]


def test_an_agent_naming_an_mcp_tool_gets_it_from_a_server_in_its_sandbox_that_ends_with_it(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    ws = workspace_with_server
    add_agent(ws, "Read, mcp__ctx__lookup")
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr

    first, second = child_requests(api_server)
    assert "mcp__ctx__lookup" in first.tool_names and "Read" in first.tool_names
    answer = second.tool_results[0]["content"]
    assert "value of k1" in answer
    assert "outside refused" in answer  # the server runs inside the read-only child's sandbox
    assert not list((ws.parent / "outside").iterdir())
    command = [sys.executable, "-m", "tests.support.mcp_lookup_server", str(ws.parent / "outside")]
    assert wait_for(lambda: not running(*command), 10)  # it ended with the child


def test_an_agent_that_names_no_mcp_tool_gets_none_and_starts_no_server(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    ws = workspace_with_server
    api_server.handler = delegate("general-purpose")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr
    [request] = child_requests(api_server)
    assert not [name for name in request.tool_names if name.startswith("mcp__")]
    # the parent's server alone (the main agent has the session's servers): a writing
    # child's would have noted its start too
    assert len(list(ws.glob("started-*"))) == 1


def test_an_agent_naming_a_server_nobody_configured_is_warned_about_and_runs_without_it(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    add_agent(tmp_path, "Read, mcp__ctx__lookup")
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go"], cli_env(api_server, HOME=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    left_out = (
        "MCP servers left out (no .mcp.json or --mcp-config defines it): ctx (agent ctx-user)"
    )
    assert left_out in done.stderr
    [request] = child_requests(api_server)
    assert "mcp__ctx__lookup" not in request.tool_names


def test_a_servers_wildcard_in_an_agents_tools_gives_its_child_the_servers_tools(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    ws = workspace_with_server
    add_agent(ws, "mcp__ctx__*")
    listed = run_cli(["agents"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert "tools: mcp__ctx\n" in listed.stdout
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr
    first, second = child_requests(api_server)
    assert "mcp__ctx__lookup" in first.tool_names
    assert "value of k1" in second.tool_results[0]["content"]


def test_a_server_that_cannot_start_ends_its_child_with_an_error_saying_which(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    add_agent(tmp_path, "mcp__ctx")
    broken = {"mcpServers": {"ctx": {"command": str(tmp_path / "no-such-server")}}}
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    args = ["run", "go", "--mcp-config", json.dumps(broken)]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # the parent goes on: its task failed
    assert "MCP server 'ctx' did not start" in done.stderr
    assert child_requests(api_server) == []


def test_the_sdks_mcp_servers_option_gives_a_subagent_its_server(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """``ClaudeAgentOptions(mcp_servers=...)`` as the SDK sends it (``--mcp-config``)."""
    add_agent(tmp_path, "Read, mcp__ctx__lookup")
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_lookup_server", str(tmp_path)],
        "env": {"PYTHONPATH": str(REPO)},
    }
    args = sdk_args(mcp_servers={"ctx": server})
    assert "--mcp-config" in args
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    env = cli_env(api_server, HOME=str(tmp_path))
    done = run_cli(["-p", "go", *args], env, cwd=tmp_path, input="")
    assert '"type":"result"' in done.stdout.replace(" ", ""), done.stderr
    [_, second] = child_requests(api_server)
    assert "value of k1" in second.tool_results[0]["content"]


def sdk_calc(secrets: list[str] | None = None) -> object:
    """The SDK's in-process server ``calc``, whose ``add`` answers ``sum N`` and whose
    ``secret`` notes its call in ``secrets``."""

    @claude_agent_sdk.tool("add", "Add two numbers.", {"a": int, "b": int})
    async def add(args: dict[str, int]) -> dict[str, object]:
        return {"content": [{"type": "text", "text": f"sum {args['a'] + args['b']}"}]}

    @claude_agent_sdk.tool("secret", "The user's secret.", {})
    async def secret(args: dict[str, int]) -> dict[str, object]:
        if secrets is not None:
            secrets.append("called")
        return {"content": [{"type": "text", "text": "the secret"}]}

    return claude_agent_sdk.create_sdk_mcp_server("calc", tools=[add, secret])


def mcp_status_through_the_sdk(cli: Path, server: MessagesServer, tmp_path: Path) -> Any:
    """Init's mcp_servers, get_mcp_status's answer and the result of a query with an http
    server no one can reach and the SDK's calc server, through the SDK and ``cli``."""
    options = claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(cli),
        cwd=str(tmp_path),
        env={
            **cli_env(server, HOME=str(tmp_path)),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        mcp_servers={"web": {"type": "http", "url": "http://127.0.0.1:9/mcp"}, "calc": sdk_calc()},
    )

    async def talk() -> Any:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("hi")
            messages = [m async for m in client.receive_response()]
            status = await client.get_mcp_status()
        init = next(m for m in messages if getattr(m, "subtype", "") == "init")
        by_name = {s["name"]: s["status"] for s in status["mcpServers"]}
        return init.data["mcp_servers"], by_name, messages[-1]

    return asyncio.run(asyncio.wait_for(talk(), 120))


def test_a_server_that_cannot_start_is_failed_in_init_and_mcp_status_and_the_session_runs_on(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("fine")
    init, status, result = mcp_status_through_the_sdk(ISOAGENT_SCRIPT, api_server, tmp_path)
    web = next(s for s in init if s["name"] == "web")
    assert (web["status"], web["source"]) == ("failed", "dynamic")
    assert "needs --child-network on" in web["error"]
    assert status == {"web": "failed", "calc": "connected"}
    assert isinstance(result, claude_agent_sdk.ResultMessage) and result.result == "fine"


@needs_claude
def test_claude_code_shows_the_same_servers_the_same_way(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("fine")
    init, status, result = mcp_status_through_the_sdk(CLAUDE, api_server, tmp_path)
    assert {s["name"]: s["status"] for s in init} == {"web": "failed", "calc": "connected"}
    assert status == {"web": "failed", "calc": "connected"}
    assert isinstance(result, claude_agent_sdk.ResultMessage) and result.result == "fine"


def test_the_sdks_control_requests_about_servers_and_context_are_answered(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    """get_context_usage is the parent's context as the API counted it; toggle_mcp_server
    turns a server off for the children after it; rewind_files and reconnect_mcp_server,
    which have nothing to act on in isoagent, are refused with the reason."""
    ws = workspace_with_server
    add_agent(ws, "Read, mcp__ctx__lookup")
    to_child = delegate("ctx-user")

    def handler(req: Request) -> Reply:
        said = [b.get("text") for b in req.messages[-1]["content"] if isinstance(b, dict)]
        if req.is_parent and "hi" in said:
            return Reply([{"type": "text", "text": "hello"}], usage=(1200, 34), cache=(0, 800))
        if req.is_parent and "look" in said:
            task = {"description": "look", "prompt": "look k1", "subagent_type": "ctx-user"}
            return tool_reply("Agent", task)
        return to_child(req)  # type: ignore[operator, no-any-return]

    api_server.handler = handler
    options = claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(ws),
        env=cli_env(api_server, HOME=str(ws.parent)),
        extra_args={"trust": None},  # the workspace's .mcp.json, trusted for the run
    )

    async def talk() -> tuple[Any, ...]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("hi")
            _ = [m async for m in client.receive_response()]
            usage = await client.get_context_usage()
            await client.toggle_mcp_server("ctx", False)
            status = await client.get_mcp_status()
            refusals = []
            for ask in (client.rewind_files("u1"), client.reconnect_mcp_server("ctx")):
                try:
                    await ask
                except Exception as exc:
                    refusals.append(str(exc))
            await client.query("look")
            _ = [m async for m in client.receive_response()]
            return usage, status, refusals

    usage, status, refusals = asyncio.run(asyncio.wait_for(talk(), 120))
    assert (usage["totalTokens"], usage["maxTokens"]) == (2034, 200_000)
    assert [s["status"] for s in status["mcpServers"] if s["name"] == "ctx"] == ["disabled"]
    assert "keeps no file checkpoints" in refusals[0] and "no MCP connection" in refusals[1]
    (child,) = [r for r in child_requests(api_server)]
    assert "Read" in child.tool_names and "mcp__ctx__lookup" not in child.tool_names


def test_an_sdk_in_process_servers_tool_reaches_a_subagent_through_the_parent(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """``create_sdk_mcp_server``: the server lives in the SDK's process, which only the
    parent talks to; the child's call goes through it and back."""
    adder = claude_agent_sdk.AgentDefinition(
        description="Adds.", prompt="Add.", tools=["Read", "mcp__calc__add"]
    )
    options = claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(tmp_path),
        env=cli_env(api_server, HOME=str(tmp_path)),
        mcp_servers={"calc": sdk_calc()},
        agents={"adder": adder},
    )

    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                task = {"description": "add", "prompt": "add 2 and 3", "subagent_type": "adder"}
                return tool_reply("Agent", task)
            return text_reply("done")
        if req.turn == 0:
            return tool_reply("mcp__calc__add", {"a": 2, "b": 3})
        return text_reply(req.tool_results[0]["content"])

    api_server.handler = handler  # type: ignore[assignment]

    async def ask() -> list[object]:
        return [message async for message in claude_agent_sdk.query(prompt="go", options=options)]

    messages = asyncio.run(asyncio.wait_for(ask(), 120))
    assert isinstance(messages[-1], claude_agent_sdk.ResultMessage)
    first, second = child_requests(api_server)
    assert "mcp__calc__add" in first.tool_names and "Read" in first.tool_names
    spec = next(t for t in first.body["tools"] if t["name"] == "mcp__calc__add")
    assert spec["input_schema"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
    }
    assert second.tool_results[0]["content"] == "sum 5"


def test_a_child_cannot_call_an_sdk_servers_tool_its_task_does_not_give(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A child is untrusted: its ``McpCall`` for a tool its agent was not given ends it,
    and the SDK's server never hears of it."""
    secrets: list[str] = []
    forger = f"{sys.executable} -m tests.support.faulty_children forge-mcp {tmp_path}"
    adder = claude_agent_sdk.AgentDefinition(
        description="Adds.", prompt="Add.", tools=["mcp__calc__add"]
    )
    env = cli_env(api_server, HOME=str(tmp_path), ISOAGENT_CHILD_COMMAND=forger)
    env["PYTHONPATH"] = str(REPO)
    options = claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(tmp_path),
        env=env,
        mcp_servers={"calc": sdk_calc(secrets)},
        agents={"adder": adder},
    )

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply(
                "Agent", {"description": "a", "prompt": "a", "subagent_type": "adder"}
            )
        return text_reply(str(req.tool_results[0]["content"]))

    api_server.handler = handler  # type: ignore[assignment]

    async def ask() -> list[object]:
        return [message async for message in claude_agent_sdk.query(prompt="go", options=options)]

    messages = asyncio.run(asyncio.wait_for(ask(), 120))
    assert (tmp_path / "forged.pid").exists()
    assert secrets == []
    result = messages[-1]
    assert isinstance(result, claude_agent_sdk.ResultMessage)
    refused = "called an MCP tool its Task does not give it: mcp__calc__secret"
    assert f"{refused} (its Task gives it mcp__calc__add)" in str(result.result)


def test_a_server_no_child_can_use_is_failed_in_init_and_the_run_goes_on(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """As Claude Code shows a server it cannot reach: ``-p`` with text input has no SDK to
    reach an in-process server through, and children without network no http server."""
    api_server.handler = lambda req: text_reply("fine")
    servers = {"calc": {"type": "sdk", "name": "calc"}, "web": {"type": "http", "url": "http://a"}}
    args = ["-p", "hi", "--mcp-config", json.dumps({"mcpServers": servers})]
    args += ["--output-format", "stream-json", "--verbose"]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path)), cwd=tmp_path, input="")
    assert done.returncode == 0, done.stderr
    assert "warning: MCP server 'calc' failed: its type is sdk" in done.stderr
    assert "warning: MCP server 'web' failed: an http or sse server needs --child-network on" in (
        done.stderr
    )
    init, *_, result = (json.loads(line) for line in done.stdout.splitlines())
    assert [(s["name"], s["status"], s["source"]) for s in init["mcp_servers"]] == [
        ("calc", "failed", "dynamic"),
        ("web", "failed", "dynamic"),
    ]
    assert result["result"] == "fine"


def lookup_server(outside: Path) -> dict[str, object]:
    """The lookup server's settings, as an .mcp.json or mcpServers entry holds them."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_lookup_server", str(outside)],
        "env": {"PYTHONPATH": str(REPO)},
    }


def write_agent(workspace: Path, name: str, *front: str) -> None:
    """An agent file ``name`` with the front matter lines ``front``, in ``workspace``."""
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    lines = ["---", f"name: {name}", f"description: The {name} agent.", *front, "---"]
    (agents / f"{name}.md").write_text("\n".join([*lines, f"You are {name}.", ""]))


def test_an_agent_whose_mcp_servers_names_a_configured_server_gets_its_tools(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    ws = workspace_with_server
    write_agent(ws, "ctx-user", "mcpServers: [ctx]")  # no tools: every tool of ctx
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr
    assert "MCP servers left out" not in done.stderr

    first, second = child_requests(api_server)
    assert "mcp__ctx__lookup" in first.tool_names and "Read" in first.tool_names
    assert "value of k1" in second.tool_results[0]["content"]


def test_an_agents_inline_mcp_server_is_its_own_and_no_other_agents(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """``mcpServers: [{ctx: {...}}]`` gives ``owner`` a server; ``other``, whose tools name
    ``mcp__ctx__lookup``, does not see it: nothing the run configures is called ctx."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    inline = json.dumps([{"ctx": lookup_server(outside)}])
    write_agent(ws, "owner", f"mcpServers: {inline}")
    write_agent(ws, "other", "tools: Read, mcp__ctx__lookup")
    api_server.handler = delegate_in_turn("owner", "other")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(tmp_path)), cwd=ws)
    assert done.returncode == 0, done.stderr

    owner = [r for r in child_requests(api_server) if "You are owner." in r.system]
    other = [r for r in child_requests(api_server) if "You are other." in r.system]
    assert "mcp__ctx__lookup" in owner[0].tool_names
    assert "value of k1" in owner[1].tool_results[0]["content"]
    [request] = other
    assert "mcp__ctx__lookup" not in request.tool_names and "Read" in request.tool_names
    left_out = "MCP servers left out (no .mcp.json or --mcp-config defines it): ctx (agent other)"
    assert left_out in done.stderr


def test_a_server_name_in_mcp_servers_that_nothing_defines_is_named_in_the_warning(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    ws = workspace_with_server
    write_agent(ws, "ctx-user", "mcpServers:", "  - ctx", "  - nosuch")
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr
    [warning] = [line for line in done.stderr.splitlines() if "MCP servers left out" in line]
    assert warning.endswith(
        "MCP servers left out (no .mcp.json or --mcp-config defines it): nosuch (agent ctx-user)"
    )
    first, _ = child_requests(api_server)
    assert [name for name in first.tool_names if name.startswith("mcp__")] == ["mcp__ctx__lookup"]


def test_an_agent_with_a_tools_list_gets_of_its_mcp_servers_only_what_the_list_names(
    api_server: MessagesServer, workspace_with_server: Path
) -> None:
    """As in Claude Code, ``tools`` is an allow-list: it keeps MCP tools it does not name
    out, those of the servers ``mcpServers`` lists too."""
    ws = workspace_with_server
    write_agent(ws, "ctx-user", "tools: Read", "mcpServers: [ctx]")
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(["run", "go", "--trust"], cli_env(api_server, HOME=str(ws.parent)), cwd=ws)
    assert done.returncode == 0, done.stderr
    [request] = child_requests(api_server)
    assert request.tool_names == ["Read"]


def test_a_malformed_mcp_servers_entry_skips_the_agent_file_with_one_line(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    write_agent(tmp_path, "ctx-user", "mcpServers:", "  - ctx: not-a-mapping")
    api_server.handler = delegate("general-purpose")  # type: ignore[assignment]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    done = run_cli(["run", "go"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / ".claude" / "agents" / "ctx-user.md"
    skipped = f"agent file skipped: {path}:4: mcpServers: 'ctx' must map to a server's settings"
    assert [line for line in done.stderr.splitlines() if "skipped" in line] == [
        f"isoagent: {skipped}"
    ]


def test_an_sdk_agent_definitions_inline_mcp_server_gives_that_subagent_its_tools(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """``AgentDefinition(mcpServers=[...])``, which the SDK sends in ``initialize``."""
    agent = claude_agent_sdk.AgentDefinition(
        description="Looks keys up.",
        prompt="Look keys up.",
        mcpServers=[{"ctx": {"type": "stdio", **lookup_server(tmp_path)}}],
    )
    options = claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(tmp_path),
        env=cli_env(api_server, HOME=str(tmp_path)),
        agents={"sdk-ctx": agent},
    )
    api_server.handler = delegate("sdk-ctx")  # type: ignore[assignment]

    async def ask() -> list[object]:
        return [message async for message in claude_agent_sdk.query(prompt="go", options=options)]

    messages = asyncio.run(asyncio.wait_for(ask(), 120))
    assert isinstance(messages[-1], claude_agent_sdk.ResultMessage)
    first, second = child_requests(api_server)
    assert "mcp__ctx__lookup" in first.tool_names
    assert "value of k1" in second.tool_results[0]["content"]


def test_strict_mcp_config_leaves_an_agent_files_own_servers_out_but_not_agents_jsons(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """As Claude Code: ``--strict-mcp-config`` covers servers an agent file defines, not
    those ``--agents`` (the caller's own input) defines."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    inline = [{"ctx": lookup_server(outside)}]
    write_agent(ws, "owner", f"mcpServers: {json.dumps(inline)}")
    given = {"given": {"description": "d", "prompt": "You are given.", "mcpServers": inline}}
    api_server.handler = delegate_in_turn("owner", "given")  # type: ignore[assignment]
    args = ["-p", "go", "--trust", "--strict-mcp-config", "--agents", json.dumps(given)]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path)), cwd=ws)
    assert done.returncode == 0, done.stderr
    why = "--strict-mcp-config: an agent file's own servers do not run"
    assert f"MCP servers left out ({why}): ctx (agent owner)" in done.stderr

    [owner] = [r for r in child_requests(api_server) if "You are owner." in r.system]
    assert "mcp__ctx__lookup" not in owner.tool_names
    given_requests = [r for r in child_requests(api_server) if "You are given." in r.system]
    assert "mcp__ctx__lookup" in given_requests[0].tool_names
    assert "value of k1" in given_requests[1].tool_results[0]["content"]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The lookup server over streamable HTTP, on every address: its port. One for the
    module's tests (a start imports the official server, seconds of CPU)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outside = tmp_path_factory.mktemp("http-outside")
    args = ["-m", "tests.support.mcp_lookup_server", str(outside), "--http", str(port)]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen([sys.executable, *args], cwd=REPO, **quiet)
    try:
        assert wait_for(lambda: listening(port), 30)
        yield port
    finally:
        server.kill()
        server.wait()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("options", "seen"),
    [
        (["--allowed-domains", "127.0.0.2", "--allow-local-fetch", "127.0.0.2"], "value of k1"),
        (["--allowed-domains", "example.com"], "127.0.0.2 is not in --allowed-domains"),
        ([], "needs --child-network on"),
    ],
    ids=["allowed", "not-allowed", "no-network"],
)
def test_an_http_server_is_reached_through_the_egress_proxy_alone(
    api_server: MessagesServer, tmp_path: Path, http_server: int, options: list[str], seen: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    server = {"type": "http", "url": f"http://127.0.0.2:{http_server}/mcp"}
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {"ctx": server}}))
    add_agent(ws, "Read, mcp__ctx__lookup")
    api_server.handler = delegate("ctx-user")  # type: ignore[assignment]
    done = run_cli(
        ["run", "go", "--trust", *options], cli_env(api_server, HOME=str(tmp_path)), cwd=ws
    )
    assert done.returncode == 0, done.stderr
    results = [str(r.tool_results) for r in child_requests(api_server)]
    assert seen in done.stdout + done.stderr + "".join(results)
    if seen != "value of k1":  # the child did not start: no model call was made with it
        assert not [r for r in child_requests(api_server) if "mcp__ctx__lookup" in r.tool_names]
