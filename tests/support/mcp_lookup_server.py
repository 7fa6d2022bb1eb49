"""An MCP server for the tests: ``python -m tests.support.mcp_lookup_server OUTSIDE``
(stdio), or with ``--http PORT`` over streamable HTTP on every address.

It notes its start as ``started-<random>`` in its working folder (where it may write; not
by its pid: a confined server is pid 1 of its own namespace), holding its environment as
JSON, and its one tool, ``lookup``, answers with the key, its pid, whether it could write in
OUTSIDE, a folder outside the workspace (a sandboxed child's server cannot), and whether it
was given an API key; a key that is an absolute path, with what the server reads there.

Over stdio it speaks MCP's JSON-RPC lines itself, as the Messages API server of these tests
does HTTP: the official server package costs about two seconds of CPU to import, at every
start, and the child's client (the part under test) is the official one. Over HTTP it is the
official ``MCPServer``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

OUTSIDE = Path(sys.argv[1])
NAME = "ctx"
LOOKUP = {
    "name": "lookup",
    "description": "Look a key up.",
    "inputSchema": {
        "type": "object",
        "properties": {"key": {"title": "Key", "type": "string"}},
        "required": ["key"],
    },
}


def lookup(key: str) -> str:
    """Look a key up."""
    if key.startswith("/"):
        try:
            return f"{key}: {Path(key).read_text()!r}"
        except OSError as exc:
            return f"{key}: {exc.strerror}"
    try:
        (OUTSIDE / f"written-by-{os.getpid()}").write_text("x")
        outside = "written"
    except OSError:
        outside = "refused"
    key_given = "given" if os.environ.get("ANTHROPIC_API_KEY") else "none"
    return f"value of {key}; pid {os.getpid()}; outside {outside}; api key {key_given}"


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The result of a request, or raise LookupError for a method it does not have."""
    if method == "initialize":
        return {
            "protocolVersion": params["protocolVersion"],  # the client's: it offers one
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": NAME, "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [LOOKUP]}
    if method == "tools/call" and params.get("name") == "lookup":
        text = lookup(str(params.get("arguments", {}).get("key", "")))
        return {"content": [{"type": "text", "text": text}], "isError": False}
    raise LookupError(method)


def serve_stdio() -> None:
    """One JSON-RPC message a line on stdin; a response a line on stdout for each request
    (a message with an id); notifications need none."""
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = answer(message["method"], message.get("params") or {})
        except LookupError:
            reply["error"] = {"code": -32601, "message": f"no method {message['method']}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def serve_http(port: int) -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    server = MCPServer(NAME)
    server.tool()(lookup)
    anyone = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server.run("streamable-http", host="0.0.0.0", port=port, transport_security=anyone)


if __name__ == "__main__":
    if sys.argv[2:3] == ["--http"]:
        serve_http(int(sys.argv[3]))
    else:
        with contextlib.suppress(OSError):  # a read-only child's server may not
            Path(f"started-{secrets.token_hex(8)}").write_text(json.dumps(dict(os.environ)))
        serve_stdio()
