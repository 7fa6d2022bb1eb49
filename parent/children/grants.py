"""What a child's Task granted it, and each claim of its frames held to that grant.

A child is untrusted: a prompt-injected one can write any frame. The parent pays for
every call and acts for the child only as its Task allows, so it checks each claim
against the Task it sent before anything else sees it:

- a ``ModelCall``: the Task's model, at most the Task's ``max_tokens``, at most
  ``max_turns`` calls, and no tool the API runs itself (a server tool, such as web search)
  that its agent type was not given: those reach the network from the API's side,
  whatever the child's sandbox;
- an ``McpCall``: only a tool of an SDK server its Task gave its agent;
- a ``TaskCall``: only from a child whose Task granted delegation, and only for an agent
  type it may start (``startable``): never one with more tools, MCP tools or bash than
  its own, so a read-only child starts read-only types only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from isoagent.child.agent.loop import agent_options
from isoagent.child.agent.tools import TOOL_CLASSES, make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.mcp import granted, tool_name
from isoagent.protocol import AgentSpec, McpCall, ModelCall, Task, TaskCall, ToolSpec


def beyond(asking: AgentSpec, asked: AgentSpec) -> str:
    """What an ``asked`` child has that an ``asking`` one has not ("": nothing): a tool,
    an MCP tool or server, or a command its bash rules would not run."""
    more = [tool for tool in asked.tools if tool not in asking.tools]
    more += [name for name in asked.mcp_tools if not _covers(asking.mcp_tools, name)]
    more += [f"its MCP server {s.name}" for s in asked.mcp_servers if s not in asking.mcp_servers]
    if "Bash" in asked.tools and "Bash" in asking.tools:
        allow = set(asked.bash_allow)
        if asking.bash_allow and not (allow and allow <= set(asking.bash_allow)):
            more.append("bash commands that its rules do not allow")
        if not set(asking.bash_deny) <= set(asked.bash_deny):
            more.append("bash commands that its rules deny")
    return ", ".join(more)


def _covers(names: list[str], name: str) -> bool:
    """Whether MCP grant ``names`` covers ``name`` (``mcp__s__t``, or ``mcp__s``: all of s's)."""
    server, _, tool = name.removeprefix("mcp__").partition("__")
    return name in names or (bool(tool) and granted(names, server, tool))


def startable(
    agent: AgentSpec, depth: int, max_depth: int, agents: Mapping[str, AgentSpec]
) -> tuple[dict[str, str], str]:
    """The agent types a child of ``agent`` at ``depth`` may start (name: description), and
    when there are none, why. Nesting is the agent type's (Claude Code's ``Task`` in its
    tools), not that of the tools a session offers it; a type with more than ``agent`` is
    never among them."""
    if depth >= max_depth:
        return {}, f"depth {depth} of --max-depth {max_depth}"
    if not agent.delegates:
        return {}, f"{agent.name} does not delegate"
    return {name: spec.description for name, spec in agents.items() if not beyond(agent, spec)}, ""


class Grants:
    """What one child's Task grants; ``refusal`` counts its model calls."""

    def __init__(self, task: Task, no_delegation: str = "") -> None:
        """``no_delegation``: why its Task grants no ``Agent`` (``startable``'s), if it does not."""
        self.task = task
        self.no_delegation = no_delegation
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
        """Why ``call`` is refused ("": its Task gives it the tool), naming what it gives."""
        if (call.server, call.tool) in self.sdk_tools:
            return ""
        given = sorted(tool_name(server, tool) for server, tool in self.sdk_tools)
        return (
            f"{tool_name(call.server, call.tool)} (its Task gives it "
            f"{', '.join(given) or 'no tool of an SDK server'})"
        )

    def delegation_refusal(self, call: TaskCall) -> str:
        """Why ``call`` is refused ("": its Task lets it start a child of that type)."""
        allowed = self.task.subagents
        if call.subagent_type in allowed:
            return ""
        asked = f"asked for a {call.subagent_type} child"
        if not allowed:
            return f"{asked}, but its Task grants no delegation ({self.no_delegation})"
        return f"{asked}, but its Task lets it start only {', '.join(allowed)}"


def _describe(spec: ToolSpec) -> str:
    return f"{spec.name!r} ({spec.type}, max_uses {spec.max_uses or 'unlimited'})"
