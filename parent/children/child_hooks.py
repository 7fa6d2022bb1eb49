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
    ModelCall,
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
    """The hooks see a child's steps as its model asked for them (a child is untrusted).

    The parent relayed every model answer, so it holds the tool calls of the latest one,
    with the inputs the model gave. A child may ask the hooks only about those: once per
    call and event, a PreToolUse with the model's input, a PostToolUse with the input the
    call ran with (the model's, or what a PreToolUse hook put instead) and an output within
    its Task's output cap, a Stop only after an answer without tool calls. The hooks are
    asked with the parent's copy of each of these (``claim``), never the child's. Before
    its next model call each call the plan names was asked about, and a denied call's
    result, as its model reads it, is the denial; a child that ran past the hooks cannot be
    undone, but is ended, and the reason says how. A plan of ``*`` (an MCP server granted
    whole) names every tool its model was offered."""

    def __init__(self, plan: HookPlan, output_cap: int) -> None:
        self.plan = plan
        self.output_cap = output_cap  # a tool result's, as the child's loop cuts it
        self._uses: dict[str, ToolUseBlock] = {}  # the latest answer's calls, by id
        self._ended = False  # the latest answer has no tool call: a Stop may follow it
        self._heard: dict[tuple[str, str], HookReply] = {}  # (event, id): what hooks said
        self._stop_blocked = False  # a Stop hook made it go on (Claude Code's stop_hook_active)
        self._stopped = False  # a hook ended it (continue: false)

    def answered(self, call: ModelCall, reply: ModelReply) -> None:
        """The model's answer to ``call``, relayed: its tool calls of a tool it was offered
        (one it was not, the child's loop answers as unknown, asking no hook)."""
        offered = {spec.name for spec in call.tools}
        self._uses = {
            b.id: b for b in reply.content if isinstance(b, ToolUseBlock) and b.name in offered
        }
        self._ended = not any(isinstance(b, ToolUseBlock) for b in reply.content)
        self._heard.clear()

    def claim(self, call: HookCall, last_words: str) -> tuple[HookCall, str]:
        """The question the hooks are asked of ``call``, the parent's own copy of what the
        model gave (``last_words``: the child's latest words, as the parent relayed them);
        or why the child's claim is refused ("": it is not)."""
        if call.event == "Stop":
            if not self._ended or ("Stop", "") in self._heard:
                return call, "asked the Stop hooks without an answer of its model that ended"
            return HookCall(call.id, "Stop", output=last_words, again=self._stop_blocked), ""
        use = self._uses.get(call.tool_use_id)
        about = f"asked the {call.event} hooks about {call.tool_use_id or 'a call'}"
        if use is None:
            return call, f"{about}, no tool call of its model's latest answer"
        if call.tool != use.name:
            return call, f"{about} as {call.tool}, which its model called {use.name}"
        if (call.event, use.id) in self._heard:
            return call, f"{about} twice"
        given = use.input
        if call.event == "PostToolUse":
            before = self._heard.get(("PreToolUse", use.id))
            if before is None and self.plan.asks("PreToolUse", use.name):
                return call, f"ran {use.name} ({use.id}) without asking the PreToolUse hooks"
            if before is not None and before.block:
                return call, f"{about}, which a PreToolUse hook denied"
            if before is not None and before.input is not None:
                given = before.input
            if self.output_cap and len(call.output) > self.output_cap:
                return call, (
                    f"{about} with an output of {len(call.output)} characters, past its "
                    f"Task's output cap ({self.output_cap})"
                )
        if call.input != given:
            return call, f"{about} with an input other than its model gave ({use.name})"
        return HookCall(
            call.id, call.event, use.name, use.id, given, call.output, call.is_error
        ), ""

    def heard(self, call: HookCall, reply: HookReply) -> None:
        """What the hooks said of ``call`` (a ``claim``'s)."""
        self._heard[(call.event, call.tool_use_id)] = reply
        self._stopped = self._stopped or reply.stop is not None
        if call.event == "Stop":
            self._stop_blocked = self._stop_blocked or reply.block

    def refusal(self, messages: list[Message] | None, cancelled: bool = False) -> str:
        """Why the child's next model call (its ``messages``; None: its Result) breaks what
        the hooks said ("": it does not). A Result may leave calls unasked when a hook ended
        the child or the parent cancelled it."""
        if messages is None and (self._stopped or cancelled):
            return ""
        heard = self._heard
        for use in self._uses.values():
            before = heard.get(("PreToolUse", use.id))
            if before is None and self.plan.asks("PreToolUse", use.name):
                return f"ran {use.name} ({use.id}) without asking the PreToolUse hooks"
            ran = before is None or not before.block
            asked = ("PostToolUse", use.id) in heard
            if (
                messages is not None
                and ran
                and not asked
                and self.plan.asks("PostToolUse", use.name)
            ):
                return f"ran {use.name} ({use.id}) without asking the PostToolUse hooks"
        last = messages[-1].content if messages else []
        results = {b.tool_use_id: b for b in last if isinstance(b, ToolResultBlock)}
        for (event, use_id), reply in heard.items() if messages else ():
            if event != "PreToolUse" or not reply.block:
                continue
            result = results.get(use_id)
            read = as_read(reply.reason, self.output_cap)
            if result is None or not result.is_error or result.content != read:
                return f"told its model something else than a PreToolUse hook's denial of {use_id}"
        return ""
