"""One invocation's machinery: the run folder, the gateway, the supervisor, the event sinks.

``run``, ``task`` and ``batch`` all open a Session; only what they ask of it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from isoagent.child.agent.builtin_agents import BASE_TOOLS
from isoagent.child.agent.loop import Agent
from isoagent.child.agent.proc import TAG_VARIABLE
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable
from isoagent.parent.children.sandbox_policy import SandboxChoice
from isoagent.parent.children.supervisor import Supervisor
from isoagent.parent.events import (
    Broadcast,
    ChildFinished,
    ChildStarted,
    Event,
    RunFinished,
    RunStarted,
)
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway, ModelSource
from isoagent.parent.model.sdk import KEY_VARIABLES
from isoagent.parent.run_folder import RunFolder, TranscriptWriter
from isoagent.parent.task_tool import TaskTool
from isoagent.protocol import AgentSpec, Limits, ModelCall, ModelReply, Result

T = TypeVar("T")

PARENT_PROMPT = """\
You are isoagent, a coding agent working in the directory {workdir}.
You can run shell commands and read, write, edit and search files. You also have a `task` tool \
that hands a self-contained piece of work to a subagent running in its own process; only its \
final summary comes back to you. Delegate exploration and independent subtasks to keep your \
context small, and launch independent subagents in one message so they run concurrently. \
When you are done, answer the user directly and concisely."""


@dataclass
class Settings:
    workdir: Path
    model: str
    limits: Limits
    timeout: float = 600.0
    max_parallel: int = 4
    max_tokens_total: int = 0
    run_base: Path | None = None
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    child_command: list[str] | None = None  # how to start a child; default python -m isoagent.child
    sandbox: SandboxChoice = "auto"
    allow_unsandboxed: bool = False

    @property
    def runs_dir(self) -> Path:
        return self.run_base or self.workdir / ".isoagent" / "runs"


class Session:
    def __init__(
        self, settings: Settings, source: ModelSource, fork_server: ForkServer | None
    ) -> None:
        """``fork_server``: see ``supervisor.fork_server_for``; the session starts it, and
        whoever made it closes it (``Session.open`` does)."""
        self.settings = settings
        self.run = RunFolder.create(settings.runs_dir)
        self.events = Broadcast()
        self.log = TranscriptWriter(self.run.path / "run.jsonl")
        self.events.sinks.append(self._log_run_event)
        self.gateway = Gateway(
            source,
            max_concurrent=max(settings.max_parallel, 1) + 1,
            max_tokens_total=settings.max_tokens_total,
        )
        self.fork_server = fork_server
        self.supervisor = Supervisor(
            gateway=self.gateway,
            run=self.run,
            sink=self.events,
            workdir=settings.workdir,
            model=settings.model,
            limits=settings.limits,
            timeout=settings.timeout,
            max_parallel=settings.max_parallel,
            child_command=settings.child_command,
            sandbox=settings.sandbox,
            allow_unsandboxed=settings.allow_unsandboxed,
            fork_server=self.fork_server,
        )

    def _log_run_event(self, event: Event) -> None:
        """run.jsonl holds the run's own story; children's messages live in their transcripts."""
        if isinstance(event, RunStarted | RunFinished | ChildStarted | ChildFinished) or (
            getattr(event, "child", None) == ""
        ):
            self.log(event)

    def start(self) -> None:
        if self.fork_server is not None:  # it imports while the first model call is made
            with contextlib.suppress(ForkServerUnavailable):
                self.fork_server.start()
        self.events(
            RunStarted(
                run_id=self.run.run_id,
                run_dir=self.run.display(self.run.path),
                model=self.settings.model,
                workdir=str(self.settings.workdir),
                agents=list(self.settings.agents),
            )
        )

    def finish(self, result: Result) -> RunFinished:
        final = RunFinished(
            result=result,
            run_dir=self.run.display(self.run.path),
            children=list(self.supervisor.finished),
        )
        self.events(final)
        self.log.close()
        return final

    def command_environment(self) -> dict[str, str]:
        """The parent's own commands: the user's environment without the API credentials,
        tagged with the run so what they leave running can be ended."""
        env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
        env[TAG_VARIABLE] = f"run-{self.run.run_id}"
        return env

    async def run_parent(self, prompt: str) -> Result:
        """The parent agent: the child's loop, plus ``task``, with the gateway as its model."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        ctx = ToolContext(settings.workdir, settings.limits, env=self.command_environment())
        tools = make_tools(BASE_TOOLS, ctx)
        tools.append(TaskTool(ctx, self.supervisor, loop, settings.agents))
        emit = self.events

        def thread_safe(event: Event) -> None:
            loop.call_soon_threadsafe(emit, event)

        agent = Agent(
            _GatewayBridge(self.gateway, loop, ConversationRecorder(thread_safe)),
            tools,
            system=PARENT_PROMPT.format(workdir=settings.workdir),
            model_name=settings.model,
            agent_name="parent",
            max_turns=settings.limits.max_turns,
            max_tokens=settings.limits.max_tokens,
            output_cap=settings.limits.output_cap,
            max_parallel=settings.max_parallel,
            is_cancelled=ctx.cancelled.is_set,
        )
        try:
            return await run_in_thread(agent.run, prompt)
        except asyncio.CancelledError:
            ctx.cancelled.set()
            raise
        finally:
            ctx.end_commands()  # and whatever the parent's own commands left running


class _GatewayBridge:
    """The parent loop runs in a thread; its model turns go through the loop's gateway."""

    def __init__(
        self, gateway: Gateway, loop: asyncio.AbstractEventLoop, recorder: ConversationRecorder
    ) -> None:
        self.gateway = gateway
        self.loop = loop
        self.recorder = recorder

    def complete(self, call: ModelCall) -> ModelReply:
        self.recorder.before(call)
        reply = asyncio.run_coroutine_threadsafe(self.gateway.call(call), self.loop).result()
        self.recorder.after(call, reply)
        return reply


async def run_in_thread(fn: Callable[..., T], *args: object) -> T:
    """Like ``asyncio.to_thread``, but on a daemon thread that a Ctrl-C never waits for."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: object, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def target() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, value, None)

    threading.Thread(target=target, daemon=True, name="parent-agent").start()
    return await future
