"""The ``task`` tool: the parent model's way to start a child process."""

from __future__ import annotations

import asyncio
import copy
from typing import Annotated, Any

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError, input_schema
from isoagent.parent.children.supervisor import ChildRequest, Supervisor
from isoagent.parent.records.events import ChildFinished
from isoagent.protocol import AgentSpec, ToolSpec


class TaskInput(msgspec.Struct, forbid_unknown_fields=True):
    description: Annotated[str, msgspec.Meta(description="A short (3-5 word) task title")]
    prompt: Annotated[str, msgspec.Meta(description="The complete task for the subagent")]
    subagent_type: Annotated[str, msgspec.Meta(description="The agent type to use")]


class TaskTool(Tool[TaskInput]):
    name = TASK_TOOL
    Input = TaskInput
    parallel_safe = True
    description = (
        "Launch a subagent in its own process to handle a task autonomously. It starts with "
        "a fresh context and every base tool except task, and returns only its final summary, "
        "so your own context stays small. Give it a complete, self-contained prompt: it cannot "
        "see this conversation. Several task calls in one message run concurrently.\n"
        "Agent types:\n"
    )

    def __init__(
        self,
        ctx: ToolContext,
        supervisor: Supervisor,
        loop: asyncio.AbstractEventLoop,
        agents: dict[str, AgentSpec],
    ) -> None:
        super().__init__(ctx)
        self.supervisor = supervisor
        self.loop = loop
        self.agents = agents

    @property
    def spec(self) -> ToolSpec:
        schema: dict[str, Any] = copy.deepcopy(input_schema(TaskInput))
        schema["properties"]["subagent_type"]["enum"] = list(self.agents)
        kinds = "".join(f"- {a.name}: {a.description}\n" for a in self.agents.values())
        return ToolSpec(self.name, self.description + kinds, schema)

    def execute(self, inp: TaskInput) -> str:
        agent = self.agents.get(inp.subagent_type)
        if agent is None:
            raise ToolError(
                f"unknown subagent_type {inp.subagent_type!r}; choose one of: "
                + ", ".join(self.agents)
            )
        request = ChildRequest(inp.description, inp.prompt, agent)
        finished = asyncio.run_coroutine_threadsafe(
            self.supervisor.run(request), self.loop
        ).result()
        text = report(finished)
        if finished.result.status not in ("ok", "max_turns"):
            raise ToolError(text)
        return text


def report(finished: ChildFinished) -> str:
    """The child's summary plus one line of facts: all the parent's context gets."""
    result = finished.result
    facts = (
        f"{result.turns} turns, {result.tool_calls} tool calls, "
        f"{result.usage.total} tokens, {result.duration:.1f} s; transcript {finished.transcript}"
    )
    if result.status == "ok":
        return f"{result.summary or '(no summary)'}\n\n[subagent {finished.agent} done: {facts}]"
    head = f"[subagent {finished.agent} {result.status}: {result.error}; {facts}]"
    if result.summary:
        return f"{result.summary}\n\n{head}"
    return head
