"""An MCP server for the tests: ``python -m tests.support.mcp_lookup_server OUTSIDE``
(stdio), or with ``--http PORT`` over streamable HTTP on every address.

It notes its start as ``started-<pid>`` in its working folder (where it may write), and its
one tool, ``lookup``, answers with the key, its pid and whether it could write in OUTSIDE, a
folder outside the workspace (a sandboxed child's server cannot).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("ctx")
OUTSIDE = Path(sys.argv[1])


@server.tool()
def lookup(key: str) -> str:
    """Look a key up."""
    try:
        (OUTSIDE / f"written-by-{os.getpid()}").write_text("x")
        outside = "written"
    except OSError:
        outside = "refused"
    return f"value of {key}; pid {os.getpid()}; outside {outside}"


if __name__ == "__main__":
    if sys.argv[2:3] == ["--http"]:
        from mcp.server.transport_security import TransportSecuritySettings

        anyone = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        port = int(sys.argv[3])
        server.run("streamable-http", host="0.0.0.0", port=port, transport_security=anyone)
    with contextlib.suppress(OSError):  # a read-only child's server may not
        Path(f"started-{os.getpid()}").write_text("")
    server.run()
