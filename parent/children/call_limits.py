"""What a child's ``ModelCall`` and ``McpCall`` may ask for: what its Task gave it, no more.

A child is untrusted: a prompt-injected one can write any frame. The parent pays for
every call, so it checks each one against the Task it sent before the gateway sees it:
the Task's model, at most the Task's ``max_tokens``, at most ``max_turns`` calls, and
no tool the API runs itself (a server tool, such as web search) that its agent type was
not given: those reach the network from the API's side, whatever the child's sandbox.
An ``McpCall`` may name only a tool of an SDK server its Task gave its agent.
"""

from __future__ import annotations

from pathlib import Path

from isoagent.child.agent.loop import agent_options
from isoagent.child.agent.tools import TOOL_CLASSES, make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.mcp import granted, tool_name
from isoagent.protocol import McpCall, ModelCall, Task, ToolSpec


class CallLimits:
    """The limits of one child's model calls, from its Task; ``refusal`` counts the calls."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.calls = 0
        # the server tools its own tools declare, exactly as they declare them
        known = [name for name in task.agent.tools if name in TOOL_CLASSES]
        tools = make_tools(known, ToolContext(Path(task.workdir)))
        self.server_tools = [tool.spec for tool in tools if tool.spec.type]
        self.sdk_tools = {  # (server, tool) of the SDK's servers it may call through us
            (server.name, spec.name)
            for server in task.mcp_servers
            if server.type == "sdk"
            for spec in server.tools
            if granted(task.agent.mcp_tools, server.name, spec.name)
        }

    def refusal(self, call: ModelCall) -> str:
        """Why ``call`` is refused ("": it is allowed); each call counts as a turn."""
        task = self.task
        self.calls += 1
        if call.model != task.model:
            return f"model {call.model!r} is not its Task's ({task.model!r})"
        if call.options != agent_options(task.agent):
            return "request options (thinking, betas) are the parent's alone, effort its agent's"
        if call.max_tokens > task.limits.max_tokens:
            return f"max_tokens {call.max_tokens} is above its Task's {task.limits.max_tokens}"
        if task.limits.max_turns and self.calls > task.limits.max_turns:
            return (
                f"model call {self.calls} is past its Task's turn limit ({task.limits.max_turns})"
            )
        for spec in call.tools:
            if spec.type and spec not in self.server_tools:
                return f"server tool {_describe(spec)} is not one of its agent's tools"
        return ""

    def mcp_refusal(self, call: McpCall) -> str:
        """Why ``call`` is refused ("": its Task gives it the tool)."""
        if (call.server, call.tool) in self.sdk_tools:
            return ""
        return tool_name(call.server, call.tool)


def _describe(spec: ToolSpec) -> str:
    return f"{spec.name!r} ({spec.type}, max_uses {spec.max_uses or 'unlimited'})"
