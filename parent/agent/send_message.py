"""``SendMessage``: the parent model goes on with a child that has ended, its context intact
(Claude Code's SendMessage). The child's conversation, as the parent wrote it into its
transcript (out of every child's reach), is the history of a new child process of the same
agent type, whose prompt is the message; only its summary comes back, as from ``Agent``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from isoagent.child.agent.builtin_agents import SEND_MESSAGE
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError, input_schema
from isoagent.parent.agent.parent_agent import conversation_in, go_on_from
from isoagent.parent.agent.task_tool import TaskTool
from isoagent.parent.children.child_run import ChildRequest
from isoagent.protocol import ToolSpec


class SendMessageInput(msgspec.Struct, forbid_unknown_fields=True):
    """Claude Code's SendMessage input (its notify_when_idle aside)."""

    to: Annotated[str, msgspec.Meta(description="The agentId an Agent result or notification gave")]
    message: Annotated[str, msgspec.Meta(description="What to tell or ask it next")]
    summary: Annotated[str, msgspec.Meta(description="A 5-10 word label for it")] = ""


class SendMessageTool(Tool[SendMessageInput]):
    name = SEND_MESSAGE
    Input = SendMessageInput
    parallel_safe = True
    description = (
        "Continue a subagent that has finished, with its context intact: it reads your message "
        "after its whole earlier conversation and answers with a new summary. `to` is the "
        "agentId its Agent result (or notification) gave. A new Agent call starts fresh instead."
    )

    def __init__(self, ctx: ToolContext, task: TaskTool) -> None:
        """``task``: the session's Agent tool, whose children this one continues."""
        super().__init__(ctx)
        self.task = task

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, input_schema(SendMessageInput))

    def execute(self, inp: SendMessageInput) -> str:
        supervisor = self.task.supervisor
        finished = next((f for f in supervisor.finished if f.child == inp.to), None)
        if finished is None:
            running = inp.to in supervisor.live
            why = "is still running: its notification says when it ends" if running else (
                "is no subagent of this run that has ended"
            )  # fmt: skip
            raise ToolError(f"agentId {inp.to!r} {why}")
        agent = self.task.agents.get(finished.agent)
        if agent is None:
            raise ToolError(f"agentId {inp.to!r} was a {finished.agent}, no agent type now")
        transcript = supervisor.run_folder.path / Path(finished.transcript).name
        history = conversation_in(transcript, finished.child)
        if not history:
            raise ToolError(f"agentId {inp.to!r} left no conversation to go on with")
        request = ChildRequest(
            f"{finished.description} (continued)", inp.message, agent,
            history=tuple(go_on_from(history)),
        )  # fmt: skip
        return self.task.wait_for(request)
