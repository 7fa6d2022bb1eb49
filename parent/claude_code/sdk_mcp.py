"""The SDK's in-process MCP servers (``create_sdk_mcp_server``), reached as Claude Code
reaches them: JSON-RPC messages in ``mcp_message`` control requests, which only the
parent can send (the SDK is on its stdin and stdout).

Before the first run the parent lists each server's tools; a child whose agent names one
gets it as a tool of its own, and its calls come back as ``McpCall`` frames, which the
supervisor checks against the child's Task before ``SdkServers.call`` relays them. The
parent agent's own calls of them (``parent_agent.parent_mcp_tools``) are relayed alike.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from isoagent.child.agent.tools.mcp import content_text, tool_name
from isoagent.parent.claude_code.mcp_servers import McpServers
from isoagent.protocol import McpServer, ToolSpec

# a control request's ``request`` -> the SDK's ``response`` object (None: no answer came)
Control = Callable[[dict[str, Any]], dict[str, Any] | None]
PROTOCOL = "2025-06-18"  # the MCP revision the handshake names


class RelayError(Exception):
    """The SDK or its server did not answer a message, in one line."""


class SdkServers:
    def __init__(self, control: Control) -> None:
        self.control = control
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def listed(self, server: str) -> McpServer:
        """The server, its handshake done, with its tools."""
        client = {"name": "isoagent", "version": "1"}
        self._send(
            server,
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": client},
        )
        self._send(server, "notifications/initialized", notify=True)
        tools = self._send(server, "tools/list").get("tools") or []
        specs = [
            ToolSpec(t["name"], str(t.get("description") or ""), t.get("inputSchema") or {})
            for t in tools
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        return McpServer(server, type="sdk", tools=specs)

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """A tool's text content, and whether it is an error; blocks until the SDK answers."""
        try:
            result = self._send(server, "tools/call", {"name": tool, "arguments": arguments})
        except RelayError as exc:
            return f"{tool_name(server, tool)} failed: {exc}", True
        blocks = [
            b.get("text") if isinstance(b, dict) else None for b in result.get("content") or []
        ]
        texts = [text if isinstance(text, str) else None for text in blocks]
        return content_text(texts), bool(result.get("isError"))

    def _send(
        self, server: str, method: str, params: dict[str, Any] | None = None, notify: bool = False
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            with self._lock:
                message["id"] = next(self._ids)
        answer = self.control({"subtype": "mcp_message", "server_name": server, "message": message})
        if answer is None:
            raise RelayError("the SDK did not answer")
        if answer.get("subtype") != "success":
            raise RelayError(str(answer.get("error") or "the SDK refused the message"))
        reply = (answer.get("response") or {}).get("mcp_response") or {}
        if isinstance(reply.get("error"), dict):
            raise RelayError(str(reply["error"].get("message") or reply["error"]))
        result = reply.get("result")
        return result if isinstance(result, dict) else {}


def with_sdk_servers(servers: McpServers, control: Control) -> McpServers:
    """``servers`` with the SDK's own listed (or why one could not be), called through
    ``control``."""
    relay = SdkServers(control)
    listed: dict[str, McpServer | str] = {}
    for name in servers.sdk_names:
        try:
            listed[name] = relay.listed(name)
        except (RelayError, KeyError, TypeError) as exc:
            listed[name] = f"the SDK's server could not be listed: {exc}"
    return servers.with_sdk(listed, relay.call)
