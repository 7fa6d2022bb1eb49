"""The ``Agent`` tool: the parent model's way to start a child process.

A call waits for its child's summary, or with ``run_in_background`` (or an agent type with
``background: true``) returns the child's id at once: the child's end reaches the model as a
notification in its next user turn, worded as Claude Code words it (``BackgroundChildren``).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Annotated

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.child.agent.tools.base import Tool, ToolContext, ToolError
from isoagent.child.agent.tools.task import DESCRIPTION, task_spec, unknown_type
from isoagent.child.agent.tools.task import TaskInput as ChildTaskInput
from isoagent.parent.children.child_run import ChildRequest
from isoagent.parent.children.supervisor import Supervisor, ended_well, report
from isoagent.parent.records.events import ChildFinished
from isoagent.protocol import AgentSpec, ToolSpec

# a child's end as Claude Code's task_notification states it (any other: failed)
TASK_STATUS = {"ok": "completed", "cancelled": "stopped"}


class TaskInput(ChildTaskInput, forbid_unknown_fields=True):
    run_in_background: Annotated[
        bool,
        msgspec.Meta(
            description="Run it in the background: you get its id at once and are notified "
            "when it completes; meanwhile go on with other work. Default: wait for its summary."
        ),
    ] = False


class TaskTool(Tool[TaskInput]):
    name = TASK_TOOL
    Input = TaskInput
    parallel_safe = True
    description = DESCRIPTION

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
        self.background = BackgroundChildren()

    @property
    def spec(self) -> ToolSpec:
        kinds = {name: agent.description for name, agent in self.agents.items()}
        return task_spec(self.description, TaskInput, kinds)

    def execute(self, inp: TaskInput) -> str:
        agent = self.agents.get(inp.subagent_type)
        if agent is None:
            raise ToolError(unknown_type(inp.subagent_type, self.agents))
        request = ChildRequest(inp.description, inp.prompt, agent)
        if inp.run_in_background or agent.background:
            return self._in_background(request)
        return self.wait_for(request)

    def wait_for(self, request: ChildRequest) -> str:
        """Run ``request``'s child to its end: its report (a ``ToolError`` if it did not end
        well). Any thread but the loop's."""
        finished = asyncio.run_coroutine_threadsafe(
            self.supervisor.run(request), self.loop
        ).result()
        text = report(finished)
        if not ended_well(finished):
            raise ToolError(text)
        return text

    def _in_background(self, request: ChildRequest) -> str:
        async def start() -> str:
            child, run = self.supervisor.start(request)
            self.background.started(child, request.description, run)
            return child

        child = asyncio.run_coroutine_threadsafe(start(), self.loop).result()
        return LAUNCHED.format(child=child)


# Claude Code's words for a child launched in the background (without its SendMessage)
LAUNCHED = """\
Async agent launched successfully.
agentId: {child} (internal ID - do not mention to user.)
The agent is working in the background. You will be notified automatically when it \
completes. You know nothing about its results until that notification arrives - do not \
report, assume, or predict them; continue other work or respond to the user in the meantime.
Do not duplicate this agent's work - avoid working with the same files or topics it is using."""

# and for its end, a user turn the model is told is not the user's
NOTIFICATION = """\
<system-reminder>
[SYSTEM NOTIFICATION - NOT USER INPUT]
This is an automated background-task event, NOT a message from the user.
Do NOT interpret this as user acknowledgement, confirmation, or response to any pending question.

<task-notification>
<task-id>{child}</task-id>
<output-file>{transcript}</output-file>
<status>{status}</status>
<summary>Agent "{description}" {ended}</summary>
<result>{result}</result>
<usage><subagent_tokens>{tokens}</subagent_tokens><tool_uses>{tool_uses}</tool_uses>\
<duration_ms>{duration_ms}</duration_ms></usage>
</task-notification>
</system-reminder>"""


class BackgroundChildren:
    """The parent's children running in the background, and the notifications of those
    that ended, for the model's next user turn (the agent loop's ``Notices``). Any thread."""

    def __init__(self) -> None:
        self._ended: queue.Queue[str] = queue.Queue()
        self._lock = threading.Lock()
        self._undelivered = 0  # started, their notification not yet taken

    def started(self, child: str, description: str, run: asyncio.Future[ChildFinished]) -> None:
        with self._lock:
            self._undelivered += 1
        run.add_done_callback(lambda run: self._ended.put(notification(child, description, run)))

    def arrived(self) -> list[str]:
        """The notifications that came, without waiting."""
        notes = []
        with self._lock:
            while not self._ended.empty():
                notes.append(self._ended.get_nowait())
            self._undelivered -= len(notes)
        return notes

    def awaited(self, is_cancelled: Callable[[], bool]) -> list[str] | None:
        """The next notifications, once at least one came; [] when no child runs in the
        background, None when ``is_cancelled`` turns true while waiting."""
        while self._undelivered:
            if is_cancelled():
                return None
            try:
                first = self._ended.get(timeout=0.1)
            except queue.Empty:
                continue
            with self._lock:
                self._undelivered -= 1
            return [first, *self.arrived()]
        return []


def notification(child: str, description: str, run: asyncio.Future[ChildFinished]) -> str:
    """A background child's end, as the user turn Claude Code gives its model."""
    if run.cancelled():  # the session ended it before its end was recorded
        return NOTIFICATION.format(
            child=child, description=description, transcript="", status="stopped",
            ended="was stopped", result="", tokens=0, tool_uses=0, duration_ms=0,
        )  # fmt: skip
    finished = run.result()
    result = finished.result
    status = TASK_STATUS.get(result.status, "failed")
    return NOTIFICATION.format(
        child=child,
        description=description,
        transcript=finished.transcript,
        status=status,
        ended={"completed": "finished", "stopped": "was stopped"}.get(status, "failed"),
        result=result.summary if result.status == "ok" else report(finished),
        tokens=result.usage.total,
        tool_uses=result.tool_calls,
        duration_ms=round(result.duration * 1000),
    )
