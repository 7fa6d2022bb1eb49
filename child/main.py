"""Entry point of ``python -m isoagent.child``: Hello, Task, the agent loop, Result."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import Path

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.child.agent.loop import Agent, Hooks, agent_options
from isoagent.child.agent.spans import NoSpans, SpanRecorder, Spans
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.workspace import add_dirs_note
from isoagent.child.channel import ParentChannel
from isoagent.child.identity import settle_on_host
from isoagent.protocol import (
    PROTOCOL_VERSION,
    FrameError,
    FrameReader,
    FrameWriter,
    Hello,
    HookPlan,
    ParentFrame,
    Result,
    Task,
    Usage,
)

EXIT_BAD_START = 2


def take_protocol_fd() -> int:
    """Keep fd 1 for frames and point fd 1 (and ``sys.stdout``) at stderr.

    Whatever a tool or a library prints then lands in the child's log, never
    in the middle of a frame.
    """
    proto = os.dup(1)  # non-inheritable: commands the child starts never see it
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def main() -> int:
    writer = FrameWriter(take_protocol_fd())
    reader = FrameReader(0, ParentFrame)
    writer.write(Hello(PROTOCOL_VERSION, os.getpid()))
    try:
        task = reader.read()
    except FrameError as exc:
        print(f"isoagent child: {exc}", file=sys.stderr)
        return EXIT_BAD_START
    if not isinstance(task, Task):
        print(f"isoagent child: expected a Task frame, got {task!r:.80}", file=sys.stderr)
        return EXIT_BAD_START
    if not task.tmpdir:  # on another host: nothing of the parent's is here
        tmpdir = settle_on_host(task.identity)
        task = msgspec.structs.replace(task, tmpdir=tmpdir, workdir=os.path.abspath(task.workdir))

    ctx = ToolContext(
        Path(task.workdir),
        task.limits,
        sandbox=task.sandbox,
        bash_allow=task.agent.bash_allow,
        bash_deny=task.agent.bash_deny,
        owns_descendants=True,
        add_dirs=tuple(Path(path) for path in task.add_dirs),
    )
    channel = ParentChannel(reader, writer, ctx)

    def end_on_sigterm(*_: object) -> None:
        ctx.end_commands()
        os._exit(143)

    signal.signal(signal.SIGTERM, end_on_sigterm)
    if not os.path.isdir(task.workdir):  # a tool would fail on every call: fail here, once
        where = f"the workspace {task.workdir} does not exist on {os.uname().nodename}"
        channel.send(Result("", "error", 0, 0, Usage(), 0.0, error=where))
        return 1
    try:
        confine(task)  # before any thread starts: Landlock binds only the calling thread
    except Exception as exc:  # a sandbox that cannot be set up must not run unconfined
        channel.send(Result("", "error", 0, 0, Usage(), 0.0, error=f"sandbox: {exc}"))
        return 1
    channel.start(task.heartbeat)
    tools = make_tools([name for name in task.agent.tools if name != TASK_TOOL], ctx)
    if task.subagents:  # --max-depth 2 or more: its task calls are the parent's to decide
        from isoagent.child.agent.tools.task import DelegateTool

        tools.append(DelegateTool(ctx, channel.delegate, task.subagents))
    if task.mcp_servers:
        from isoagent.child.agent.tools.mcp import McpUnavailable, mcp_tools

        try:
            tools += mcp_tools(task.mcp_servers, task.agent.mcp_tools, ctx, channel.call_sdk_tool)
        except McpUnavailable as exc:
            ctx.end_commands()  # the servers that did start
            channel.send(Result("", "error", 0, 0, Usage(), 0.0, error=str(exc)))
            return 1
    spans: Spans = SpanRecorder(itertools.count(1).__next__) if task.trace else NoSpans()
    agent = Agent(
        channel,
        tools,
        system=task.agent.system_prompt + add_dirs_note(ctx.add_dirs),
        model_name=task.model,
        agent_name=task.agent.name,
        max_turns=task.limits.max_turns,
        max_tokens=task.limits.max_tokens,
        output_cap=task.limits.output_cap,
        on_progress=channel.send,
        is_cancelled=ctx.cancelled.is_set,
        call_options=agent_options(task.agent),
        hooks=Hooks(task.hooks, channel.ask_hooks) if task.hooks != HookPlan() else None,
        spans=spans,
    )
    result = agent.run(task.prompt, task.history)
    result.spans = spans.finished
    ctx.end_commands()  # nothing a command started outlives the child
    channel.send(result)
    return 0


def confine(task: Task) -> None:
    """Apply the OS sandbox and resource limits the Task asks for, before any tool runs."""
    os.environ["TMPDIR"] = task.tmpdir
    from isoagent.child import sandbox

    sandbox.confine(
        task.sandbox,
        task.limits,
        Path(task.workdir),
        Path(task.tmpdir),
        [Path(p) for p in task.add_dirs],
    )
