"""The ``Agent`` tool's input and its model-facing description, and a child's own ``Agent``
(``--max-depth`` 2 or more): its call is a request to the parent (a ``TaskCall`` frame),
which decides, and starts the child's child as a process of its own."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError, input_schema
from isoagent.protocol import TaskReply, ToolSpec

DESCRIPTION = (
    "Launch a subagent in its own process to handle a task autonomously. It starts with "
    "a fresh context and every base tool except Agent, and returns only its final summary, "
    "so your own context stays small. Give it a complete, self-contained prompt: it cannot "
    "see this conversation. Several Agent calls in one message run concurrently.\n"
    "Agent types:\n"
)


DEFAULT_AGENT = "general-purpose"  # the agent type of a call that names none, as in Claude Code


def unknown_type(name: str, agents: Iterable[str]) -> str:
    """What an ``Agent`` call for an agent type its caller may not start is told."""
    return f"unknown subagent_type {name!r}; choose one of: {', '.join(agents)}"


class TaskInput(msgspec.Struct, forbid_unknown_fields=True):
    """Claude Code's Agent input (its ``model``, ``effort``, ``isolation`` aside)."""

    description: Annotated[str, msgspec.Meta(description="A short (3-5 word) task title")]
    prompt: Annotated[str, msgspec.Meta(description="The complete task for the subagent")]
    subagent_type: Annotated[
        str, msgspec.Meta(description="The agent type to use (default general-purpose)")
    ] = DEFAULT_AGENT


def task_spec(
    description: str, inputs: type[msgspec.Struct], agents: Mapping[str, str]
) -> ToolSpec:
    """The ``Agent`` tool as the model sees it: ``agents`` (name: description) its types."""
    schema: dict[str, Any] = copy.deepcopy(input_schema(inputs))
    schema["properties"]["subagent_type"]["enum"] = list(agents)
    kinds = "".join(f"- {name}: {about}\n" for name, about in agents.items())
    return ToolSpec(TASK_TOOL, description + kinds, schema)


class DelegateTool(Tool[TaskInput]):
    """A child's ``Agent``: ``delegate`` asks the parent and waits for its ``TaskReply``."""

    name = TASK_TOOL
    Input = TaskInput
    description = DESCRIPTION

    def __init__(
        self, ctx: ToolContext, delegate: Callable[[TaskInput], TaskReply], agents: dict[str, str]
    ) -> None:
        super().__init__(ctx)
        self.delegate = delegate
        self.agents = agents

    @property
    def spec(self) -> ToolSpec:
        return task_spec(self.description, TaskInput, self.agents)

    def execute(self, inp: TaskInput) -> str:
        if inp.subagent_type not in self.agents:  # the parent would end a child that asked
            raise ToolError(unknown_type(inp.subagent_type, self.agents))
        reply = self.delegate(inp)
        if reply.is_error:
            raise ToolError(reply.text)
        return reply.text
