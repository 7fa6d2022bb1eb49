"""``--permission-prompt-tool stdio``: the parent's tool calls that need a yes are asked of
the claude-agent-sdk's ``can_use_tool``, as Claude Code asks them.

Without it nobody can be asked, and ``--allowedTools`` is the parent's whole set of tools
beyond reading (``parent_tools``). With it the parent has every tool, and a call is asked
about unless it needs no asking in Claude Code: reading and searching, what
``--allowedTools`` names (a ``Bash(...)`` rule: the commands it matches), edits under
``acceptEdits``, anything under ``bypassPermissions``. The answer may change the call's
input (``updatedInput``) or refuse it with a message the model reads. Children are not
asked about: their tools are what their agent type and ``--allowedTools`` give them.

An MCP tool is offered to the parent whatever the rules, as in Claude Code; a call that
needs a yes (``--allowedTools`` names neither it nor its server) is asked, or, with nobody
to ask, refused; in plan mode every call of one is refused (it may write anything).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from isoagent.child.agent.builtin_agents import SEND_MESSAGE, WRITE_TOOLS
from isoagent.child.agent.tools import TOOL_CLASSES
from isoagent.child.agent.tools.base import Tool, ToolOutput, ToolWrapper
from isoagent.child.agent.tools.bash_rules import CommandRefused, check
from isoagent.child.agent.tools.mcp import ServerTool, granted
from isoagent.parent.claude_code.agent_files import PLAN_MODE
from isoagent.protocol import AgentSpec

# the tools whose calls may be asked about (an MCP tool's are too); the Agent tool is not
ASKABLE = frozenset({*TOOL_CLASSES, SEND_MESSAGE})
DENIED = "Permission to use "  # how a refused call's result begins
NOT_GRANTED = "it needs a permission: --allowedTools (allowed_tools) does not name it"
IN_PLAN_MODE = "an MCP tool is not called in plan mode: nothing may write"


@dataclass(frozen=True)
class Decision:
    allow: bool
    input: dict[str, Any]  # the call's input, as the answer left it
    message: str = ""  # why not, for the model


# (the tool's name, the call's input, set when the run is cancelled) -> the answer
Ask = Callable[[str, dict[str, Any], threading.Event], Decision]


def asking_tools(
    tools: list[Tool[Any]], ask: Ask | None, allowed: AgentSpec, permission_mode: str
) -> list[Tool[Any]]:
    """``tools`` with each that may need a yes asking ``ask`` first (None: nobody can be
    asked; then only MCP tools can need a yes, and are refused); ``allowed``: what
    ``--allowedTools`` gives without asking (``parent_agent.allowed_spec``)."""
    if permission_mode == "bypassPermissions":
        return tools
    wrapped: list[Tool[Any]] = []
    for tool in tools:
        rules: list[str] = []
        if isinstance(tool, ServerTool) and permission_mode == PLAN_MODE:
            wrapped.append(AskingTool(tool, _refusal(IN_PLAN_MODE), []))
            continue
        if isinstance(tool, ServerTool):
            asks = not granted(allowed.mcp_tools, tool.server, tool.tool)
        else:
            free = tool.name in allowed.tools or (
                permission_mode == "acceptEdits" and tool.name in WRITE_TOOLS
            )
            rules = allowed.bash_allow if tool.name == "Bash" and free else []
            asks = ask is not None and tool.name in ASKABLE and (not free or bool(rules))
        wrapped.append(AskingTool(tool, ask or _refusal(NOT_GRANTED), rules) if asks else tool)
    return wrapped


def _refusal(why: str) -> Ask:
    """An answer of no, for ``why``, whatever is asked."""

    def refuse(name: str, args: dict[str, Any], cancelled: threading.Event) -> Decision:
        return Decision(False, args, why)

    return refuse


class AskingTool(ToolWrapper):
    """``tool``, whose calls are asked about first (a bash command that its ``rules``
    allow is not)."""

    def __init__(self, tool: Tool[Any], ask: Ask, rules: list[str]) -> None:
        super().__init__(tool)
        self.ask = ask
        self.rules = rules

    def run(self, args: dict[str, Any]) -> ToolOutput:
        if self.rules and _allowed(args.get("command"), self.rules):
            return self.tool.run(args)
        decision = self.ask(self.name, args, self.ctx.cancelled)
        if not decision.allow:
            why = decision.message or "the permission prompt refused it"
            return ToolOutput(f"{DENIED}{self.name} denied: {why}", True)
        return self.tool.run(decision.input)


def _allowed(command: object, rules: list[str]) -> bool:
    if not isinstance(command, str):
        return False
    try:
        check(command, rules)
    except CommandRefused:
        return False
    return True
