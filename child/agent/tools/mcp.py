"""MCP tools: the servers a Task names, their tools offered to its model as
``mcp__<server>__<tool>``. A stdio server is started by this child (so inside its sandbox,
and ended with it, as every process below a child is); an http or sse one is reached
through the egress proxy (``--child-network on``), which holds it to the allow-list; an
SDK's in-process server, through the parent, which alone reaches the SDK.

The ``mcp`` package is imported here only, and only by a child whose agent names an MCP
tool: it costs about a second of CPU. Its client is asynchronous; tools run in the agent's
threads, so the sessions live on an event loop of their own, in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolContext, ToolOutput
from isoagent.child.confine_command import confined_env
from isoagent.protocol import McpReply, McpServer, ToolSpec

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

PREFIX = "mcp__"
START_SECONDS = 60.0  # a server's start, initialize and tool list
T = TypeVar("T")
CallSdkTool = Callable[[str, str, dict[str, Any]], McpReply]


class McpUnavailable(Exception):
    """A server that could not be started or listed, in one line."""


class ServerTool(Tool[msgspec.Struct]):
    """One tool of an MCP server, offered as ``mcp__<server>__<tool>`` (a subclass per
    tool: ``name`` is a class's); ``spec`` is the server's own schema."""

    Input: ClassVar[type[msgspec.Struct]] = msgspec.Struct
    parallel_safe = True

    def __init__(self, ctx: ToolContext, server: str, spec: ToolSpec) -> None:
        super().__init__(ctx)
        self.server, self.tool = server, spec.name
        self._spec = msgspec.structs.replace(spec, name=self.name)

    @classmethod
    def of(cls, ctx: ToolContext, server: str, spec: ToolSpec, *how: Any) -> ServerTool:
        """The tool, ``how`` its class's own arguments (what it calls the server with)."""
        name = tool_name(server, spec.name)
        named = type(name, (cls,), {"name": name, "description": spec.description})
        return named(ctx, server, spec, *how)

    @property
    def spec(self) -> ToolSpec:
        return self._spec


class McpTool(ServerTool):
    """A tool of a server this child started or connected to."""

    def __init__(
        self, ctx: ToolContext, server: str, spec: ToolSpec, sessions: McpSessions
    ) -> None:
        super().__init__(ctx, server, spec)
        self.sessions = sessions

    def run(self, args: dict[str, Any]) -> ToolOutput:
        try:
            result = self.sessions.call(self.server, self.tool, args)
        except Exception as exc:  # the server died, or timed out: the model reads it
            return ToolOutput(f"{self.name} failed: {type(exc).__name__}: {exc}", True)
        text = content_text([getattr(block, "text", None) for block in result.content])
        return ToolOutput(text, is_error=bool(result.is_error))


class SdkTool(ServerTool):
    """A tool of an SDK's in-process server, called through the parent (``McpCall``)."""

    def __init__(self, ctx: ToolContext, server: str, spec: ToolSpec, call: CallSdkTool) -> None:
        super().__init__(ctx, server, spec)
        self.call = call

    def run(self, args: dict[str, Any]) -> ToolOutput:
        reply = self.call(self.server, self.tool, args)
        return ToolOutput(reply.text, is_error=reply.is_error)


def content_text(texts: list[str | None]) -> str:
    """A tool result's text blocks (None: a block of another kind), joined; what is not
    text is said to be left out."""
    text = "\n".join(t for t in texts if t is not None)
    if None in texts:
        text += "\n[content that is not text left out]"
    return text


class McpSessions:
    """The servers' client sessions, on an event loop in a thread of their own; each is
    held by a task of its own, which opens and closes it (the client's task groups must
    be left by the task that entered them)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[str, ClientSession] = {}
        self._held: list[asyncio.Task[None]] = []
        self._closing = asyncio.Event()
        threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    async def start(self, server: McpServer, ctx: ToolContext) -> list[Any]:
        """Start ``server`` in the workspace as the agent's commands start (the parent's:
        under ``ctx.command_prefix``, a writing child's sandbox), with their environment
        (its tag included) and the server's own variables, or connect to it (http, sse:
        through ``HTTP_PROXY``, the egress proxy, as every request of the child); its tools."""
        started: asyncio.Future[list[Any]] = self.loop.create_future()
        self._held.append(asyncio.ensure_future(self._hold(server, ctx, started)))
        return await started

    async def _hold(
        self, server: McpServer, ctx: ToolContext, started: asyncio.Future[list[Any]]
    ) -> None:
        """``server``'s session, open from its start until ``close``."""
        from mcp.client.session import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                if server.type == "stdio":
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    argv = [*ctx.command_prefix, server.command, *server.args]
                    params = StdioServerParameters(
                        command=argv[0],
                        args=argv[1:],
                        env=server_environment(server, ctx),
                        cwd=str(ctx.workdir),
                    )
                    transport = stdio_client(params)
                elif server.type == "sse":
                    from mcp.client.sse import sse_client

                    transport = sse_client(server.url, headers=server.headers)
                else:
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client

                    client = await stack.enter_async_context(
                        create_mcp_http_client(headers=server.headers)
                    )
                    transport = streamable_http_client(server.url, http_client=client)
                read, write, *_ = await stack.enter_async_context(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.sessions[server.name] = session
                started.set_result(list((await session.list_tools()).tools))
                await self._closing.wait()
        except Exception as exc:
            if not started.done():
                started.set_exception(exc)

    def call(self, server: str, tool: str, args: dict[str, Any]) -> Any:
        return self.run(self.sessions[server].call_tool(tool, args), None)

    def close(self) -> None:
        """End the sessions (a stdio server's stdin closes: it ends) and their thread."""

        async def end() -> None:
            self._closing.set()
            await asyncio.gather(*self._held, return_exceptions=True)

        with contextlib.suppress(Exception):  # a server left running is ended by its tag
            self.run(end(), START_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)


def server_environment(server: McpServer, ctx: ToolContext) -> dict[str, str]:
    """A stdio server's environment: the agent's commands' (allow-listed, with their tag),
    and the server's own ``env``, set inside the confinement when a wrapper confines it (the
    parent's servers: ``confined_env``), else directly (a child's: the child that starts it
    is confined already)."""
    env = dict(os.environ if ctx.env is None else ctx.env)
    return confined_env(env, server.env) if ctx.command_prefix else {**env, **server.env}


def tool_name(server: str, tool: str) -> str:
    """What the model calls a server's tool: ``mcp__<server>__<tool>``."""
    return f"{PREFIX}{server}__{tool}"


def granted(names: list[str], server: str, tool: str) -> bool:
    """Whether ``names`` (``mcp__s__t``, or ``mcp__s`` for all of s's) grants the tool."""
    return f"{PREFIX}{server}" in names or tool_name(server, tool) in names


def mcp_tools(
    servers: list[McpServer],
    names: list[str],
    ctx: ToolContext,
    call_sdk_tool: CallSdkTool,
    sessions: McpSessions | None = None,
) -> list[Tool]:
    """The tools ``names`` grants of ``servers``, each server started (an SDK's: called
    through the parent with ``call_sdk_tool``) in ``sessions`` (default: new ones, which
    end with this process); a server that fails is ``McpUnavailable``."""
    tools: list[Tool] = [
        SdkTool.of(ctx, server.name, spec, call_sdk_tool)
        for server in servers
        if server.type == "sdk"
        for spec in server.tools
        if granted(names, server.name, spec.name)
    ]
    servers = [server for server in servers if server.type != "sdk"]
    if not servers:
        return tools
    for server in servers:
        if server.type != "stdio" and not (ctx.sandbox.network or ctx.sandbox.proxy):
            raise McpUnavailable(
                f"MCP server {server.name!r} is an {server.type} server: it needs "
                "--child-network on (this child has no network)"
            )
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpUnavailable(
            "MCP servers need the mcp package: pip install 'isoagent[mcp]'"
        ) from None
    sessions = sessions or McpSessions()
    for server in servers:
        try:
            listed = sessions.run(sessions.start(server, ctx), START_SECONDS)
        except Exception as exc:
            why = str(exc) or type(exc).__name__
            raise McpUnavailable(f"MCP server {server.name!r} did not start: {why}") from None
        for tool in listed:
            if granted(names, server.name, tool.name):
                spec = ToolSpec(tool.name, tool.description or "", dict(tool.input_schema))
                tools.append(McpTool.of(ctx, server.name, spec, sessions))
    return tools
