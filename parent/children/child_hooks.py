"""The session's hooks as a child's run sees them, and what a child asked them.

The hooks themselves (a settings file's commands, the SDK's callbacks) are the parent
agent's (``parent/agent/hooks.py``); a child's run reaches them only through ``ChildHooks``,
so nothing here imports the parent agent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from isoagent.child.agent.loop import as_read
from isoagent.protocol import (
    HookCall,
    HookPlan,
    HookReply,
    Message,
    ModelReply,
    ToolResultBlock,
    ToolUseBlock,
)


@dataclass(frozen=True)
class Subagent:
    """A child, as its hooks' input names it."""

    id: str
    type: str
    transcript: str


class ChildHooks(Protocol):
    """What a child's run asks of the session's hooks."""

    def subagent_start(self, agent: Subagent) -> str:
        """SubagentStart: what its hooks add to the child's prompt."""
        ...

    def plan(self, tools: Iterable[str], agent: Subagent | None = None) -> HookPlan:
        """Which of the child's steps it asks the hooks about."""
        ...

    def answer(self, call: HookCall, agent: Subagent | None) -> HookReply:
        """Run the hooks of ``call``, one of the child's steps."""
        ...


class HookLedger:
    """What a child asked the hooks and what they said, held against what it does next (a
    child is untrusted): each call of its model's last answer that its plan names was asked
    about before its next model call or its Result, and a denied call's result, as its
    model reads it, is the denial. It cannot undo what a child ran without asking; it ends
    such a child and says why."""

    def __init__(self, plan: HookPlan, output_cap: int) -> None:
        self.plan = plan
        self.output_cap = output_cap  # a tool result's, as the child's loop cuts it
        self._uses: list[ToolUseBlock] = []  # the tool calls of the model's last answer
        self._asked: set[str] = set()  # their ids asked about
        self._denied: dict[str, str] = {}  # and those denied: the result their model must read

    def answered(self, reply: ModelReply) -> None:
        self._uses = [b for b in reply.content if isinstance(b, ToolUseBlock)]
        self._asked.clear()
        self._denied.clear()

    def heard(self, call: HookCall, reply: HookReply) -> None:
        if call.event == "PreToolUse":
            self._asked.add(call.tool_use_id)
            if reply.block:
                self._denied[call.tool_use_id] = reply.reason

    def refusal(self, messages: list[Message] | None) -> str:
        """Why the child's next model call (its ``messages``; None: its Result) breaks what
        the hooks said ("": it does not)."""
        every = "*" in self.plan.pre_tool  # its MCP tools' names are not known: not checked
        for use in self._uses:
            asks = not every and self.plan.asks("PreToolUse", use.name)
            if asks and use.id not in self._asked:
                return f"ran {use.name} ({use.id}) without asking the PreToolUse hooks"
        last = messages[-1].content if messages else []
        results = {b.tool_use_id: b for b in last if isinstance(b, ToolResultBlock)}
        for use_id, denial in self._denied.items() if messages else ():
            result = results.get(use_id)
            read = as_read(denial, self.output_cap)
            if result is None or not result.is_error or result.content != read:
                return f"told its model something else than a PreToolUse hook's denial of {use_id}"
        return ""
