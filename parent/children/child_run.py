"""One child's run, from its spawn to its Result: its Task, its Hello, its conversation
(``child_calls.py``), its timeout and Cancel, and the record of how it ended.

Where the child runs is its launcher's (``launchers.py``): this machine, or with
``--hosts`` a host that the placement (``placement.py``) picks. The run is the same
wherever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.child.agent.loop import text_of
from isoagent.parent.children.child_calls import CallContext, ChildCalls
from isoagent.parent.children.child_hooks import ChildHooks, HookLedger, Subagent
from isoagent.parent.children.cleanup import describe_exit
from isoagent.parent.children.connection import FrameRefused, StderrLog, log_cap, write_frame
from isoagent.parent.children.disk_budget import DiskBudget
from isoagent.parent.children.grants import Grants, startable
from isoagent.parent.children.large_results import ResultFiles
from isoagent.parent.children.launch import child_identity
from isoagent.parent.children.launchers import CANCEL_GRACE, ChildFailed, ChildLauncher
from isoagent.parent.children.placement import attempt_stem
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.sandbox_policy import SandboxRefused, policy_for
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway
from isoagent.parent.records.events import ChildFinished, ChildStarted, Event, MessageAdded, Sink
from isoagent.parent.records.run_folder import RunFolder, TranscriptWriter
from isoagent.parent.settings import Settings
from isoagent.protocol import (
    PROTOCOL_VERSION,
    AgentSpec,
    Cancel,
    FrameError,
    Hello,
    Identity,
    Message,
    Result,
    Status,
    Task,
    TaskCall,
    TaskReply,
)

if TYPE_CHECKING:
    from isoagent.parent.telemetry.run_trace import RunTrace


@dataclass
class ChildRequest:
    description: str
    prompt: str
    agent: AgentSpec
    depth: int = 1  # 1: the parent's child; 2: a child's (--max-depth 2), ...
    history: tuple[Message, ...] = ()  # an earlier child's conversation it goes on with
    asked_by: str = ""  # the child whose Agent call this is ("": the parent's)


def describe(prompt: str, width: int = 50) -> str:
    """A short title for the display and the transcript: the prompt's first line."""
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= width else line[: width - 3] + "..."


def child_id(number: int) -> str:
    """A child's id in its run: its number, as its transcript's name begins."""
    return f"{number:03d}"


class Supervising(Protocol):
    """What a child's run needs of the session's supervisor (``supervisor.py``)."""

    settings: Settings
    gateway: Gateway
    run_folder: RunFolder
    sink: Sink
    hooks: ChildHooks | None
    trace: RunTrace | None
    nested_protected: tuple[str, ...]
    live: dict[str, ChildRun]

    async def delegate(self, asking: ChildRun, call: TaskCall) -> TaskReply:
        """A child's ``Agent`` call, checked against the run's limits."""
        ...


class ChildRun:
    """One child process, from spawn to its last byte of stderr; where it runs is its
    launcher's (``launchers.py``)."""

    def __init__(
        self,
        sup: Supervising,
        request: ChildRequest,
        number: int,
        launcher: ChildLauncher,
        attempt: int = 0,
    ) -> None:
        self.sup = sup
        self.request = request
        self.agent = request.agent
        self.id = child_id(number)
        self.launcher = launcher
        stem = attempt_stem(sup.run_folder.child_stem(number, request.agent.name), attempt)
        self.transcript_path = stem.with_suffix(".jsonl")
        log = stem.with_suffix(".stderr.log")
        self.stderr = StderrLog(
            log, cap=log_cap(sup.settings.limits.file_size_mb), create=sup.run_folder.opener(log)
        )
        self.disk = DiskBudget(sup.settings.child_disk_mb << 20)
        self.transcript = TranscriptWriter(
            self.transcript_path, sup.run_folder.opener(self.transcript_path), spend=self.disk.spend
        )
        self.transcript_label = sup.run_folder.display(self.transcript_path)
        self.pid = 0
        self.subagent = Subagent(self.id, self.agent.name, str(self.transcript_path))
        context = CallContext(
            sup.gateway,
            sup.hooks,
            sup.settings.mcp_servers,
            sup.sink,
            lambda call: sup.delegate(self, call),
        )
        self.calls = ChildCalls(
            context,
            self.id,
            self.agent.name,
            request.description,
            ConversationRecorder(self.emit, self.id, seen=len(request.history)),
            self.subagent,
        )
        answers = [m.content for m in request.history if m.role == "assistant"]
        self.calls.last_text = next(filter(None, map(text_of, reversed(answers))), "")
        self.started = asyncio.get_running_loop().time()
        self._finished: ChildFinished | None = None
        # how the parent ended it before its Result (a budget broken, stop_task), if it did
        self.ended: asyncio.Future[ChildFailed] = asyncio.get_running_loop().create_future()
        self.span = sup.trace.child_started(self.id) if sup.trace is not None else None

    @property
    def launched(self) -> bool | None:
        return self.launcher.launched

    @property
    def link_lost(self) -> bool:
        return self.launcher.link_lost

    def emit(self, event: Event) -> None:
        self.transcript(event)
        self.sup.sink(event)

    async def run(self) -> ChildFinished:
        launcher = self.launcher
        process: ChildProcess | None = None
        drain: asyncio.Task[None] | None = None
        result: Result | None = None
        try:
            task = await self._task_with_hooks()
            process = await launcher.start(task.sandbox.pid_namespace)
            process.frames.results = ResultFiles(
                self.sup.run_folder, self.transcript_path, self.disk
            )
            self.pid = process.pid  # on its host: the launcher's here (the child's is there)
            self.sup.live[self.id] = self
            drain = asyncio.create_task(self.stderr.drain(process.stderr))
            self.emit(
                ChildStarted(
                    child=self.id,
                    agent=self.agent.name,
                    description=self.request.description,
                    prompt=self.request.prompt,
                    model=task.model,
                    pid=process.pid,
                    transcript=self.transcript_label,
                    host=launcher.host_name,
                    parent=self.request.asked_by,
                )
            )
            for message in self.request.history:  # the parent's record it goes on from
                self.emit(MessageAdded(message.role, message.content, 0, self.id))
            result = await self._outcome(process, task)
        except ChildFailed as exc:
            result = self._failure(exc.status, str(exc))
        except FrameRefused as exc:  # its record passed its disk budget
            result = self._failure("error", str(exc))
        except asyncio.CancelledError:
            result = self._failure("cancelled", "interrupted")
            raise
        finally:
            try:  # an interruption here still records the child and removes its files
                if process is not None:
                    await asyncio.shield(launcher.end(process))
                if drain is not None:
                    await _finish(drain)
            finally:
                self.sup.live.pop(self.id, None)
                if drain is not None:
                    drain.cancel()
                if process is not None:  # a grandchild may still hold the pipes
                    process.close_pipes()
                if result is not None:
                    self._finish(result, process)
                self.transcript.close()
                launcher.close()
        assert self._finished is not None
        return self._finished

    async def _task_with_hooks(self) -> Task:
        """Its Task, with what SubagentStart hooks add to its prompt, and what it asks the
        session's hooks about; its calls are held to it from here on."""
        settings = self.sup.settings
        subagents, no_delegation = startable(
            self.agent, self.request.depth, settings.max_depth, settings.agents
        )
        task = self._task(subagents)
        grants = Grants(task, no_delegation)
        hooks = self.sup.hooks
        if hooks is None:
            self.calls.granted(grants, None)
            return task
        context = await asyncio.to_thread(hooks.subagent_start, self.subagent)
        tools = [t for t in [*self.agent.tools, *self.agent.mcp_tools] if t != TASK_TOOL]
        plan = hooks.plan(tools, self.subagent)
        prompt = "\n\n".join(filter(None, [task.prompt, context]))
        task = msgspec.structs.replace(task, prompt=prompt, hooks=plan)
        self.calls.granted(grants, HookLedger(plan, task.limits.output_cap))
        return task

    def _task(self, subagents: dict[str, str]) -> Task:
        """Its Task; ``subagents``: the agent types it may start (``startable``)."""
        sup = self.sup
        settings = sup.settings
        try:
            sandbox = policy_for(self.agent, settings, sup.nested_protected)
        except SandboxRefused as exc:
            raise ChildFailed(f"was not started: {exc}", "error") from None
        limits = msgspec.structs.replace(
            settings.limits, max_turns=self.agent.max_turns or settings.limits.max_turns
        )
        launcher = self.launcher
        run_id = sup.run_folder.run_id
        return Task(
            prompt=self.request.prompt,
            agent=self.agent,
            model=self.agent.model or settings.model,
            workdir=launcher.workdir,
            tmpdir=launcher.tmpdir,
            limits=limits,
            sandbox=sandbox,
            identity=self._identity(launcher.tag(self.transcript_path.stem), run_id),
            heartbeat=launcher.heartbeat,
            add_dirs=[str(path) for path in settings.add_dirs],
            mcp_servers=settings.mcp_servers.for_agent(self.agent),
            subagents=subagents,
            trace=self.span is not None,
            history=list(self.request.history),
        )

    def _identity(self, tag: str, run_id: str) -> Identity:
        identity = child_identity(tag, run_id=run_id, child=self.id)
        return msgspec.structs.replace(identity, depth=identity.depth + self.request.depth - 1)

    async def _outcome(self, process: ChildProcess, task: Task) -> Result:
        """The child's Result, or one that says how the child failed."""
        try:
            try:
                async with asyncio.timeout(self.sup.settings.timeout):
                    result = await self._converse(process, task)
            except TimeoutError:
                why = f"timed out after {self.sup.settings.timeout:g} s"
                if unfinished := process.frames.unfinished():
                    why += f", {unfinished}"
                result = await self._cancel(process, why)
            await process.wait_exit(1.0)  # after its Result a child exits by itself
            return result
        except FrameRefused as exc:
            return self._failure("error", str(exc))
        except FrameError as exc:
            return self._failure("crashed", f"sent a corrupt frame: {exc}")
        except ChildFailed as exc:
            await process.wait_exit(1.0)
            message = self.launcher.failure(exc, process)
            return self._failure(exc.status, message, process.returncode)

    async def _cancel(self, process: ChildProcess, why: str) -> Result:
        """Ask the child to stop (Cancel) and take the Result it sends within a moment."""
        failure = self._failure("timeout", why)
        self.calls.cancelled = True
        if not await process.answer(Cancel(why)):  # and the call it was making, if any
            return failure
        with contextlib.suppress(TimeoutError, FrameError, ChildFailed):
            async with asyncio.timeout(CANCEL_GRACE):
                while True:
                    frame = await self.calls.answer(process)
                    if isinstance(frame, Result):
                        return msgspec.structs.replace(frame, status="timeout", error=failure.error)
        return failure

    async def _converse(self, process: ChildProcess, task: Task) -> Result:
        launcher = self.launcher
        try:
            async with asyncio.timeout(launcher.hello_timeout):
                hello = await process.frames.next()
        except TimeoutError:
            why = f"sent no Hello within {launcher.hello_timeout:g} s"
            raise launcher.not_started(why) from None
        except FrameError as exc:
            raise launcher.unreadable_hello(exc) from None
        if hello is None:
            raise launcher.not_started("exited before saying Hello")
        launcher.said_hello()
        if not isinstance(hello, Hello):
            raise ChildFailed(f"spoke before saying Hello ({type(hello).__name__})")
        if hello.version != PROTOCOL_VERSION:
            raise ChildFailed(
                f"speaks protocol version {hello.version}, this parent speaks "
                f"{PROTOCOL_VERSION}: reinstall isoagent so both come from one version",
                "error",
            )
        if not await write_frame(process.stdin, task):
            raise ChildFailed("closed its input before taking its Task")
        return await launcher.watch(self._until_ended(self.calls.talk(process)), process)

    def end(self, failure: ChildFailed) -> None:
        """End this child now, as ``failure`` says (once: the first reason stands)."""
        if not self.ended.done():
            self.ended.set_result(failure)

    async def _until_ended(self, talk: Coroutine[Any, Any, Result]) -> Result:
        """``talk``'s Result, unless the parent ends the child first (``end``)."""
        talking = asyncio.ensure_future(talk)
        either: list[asyncio.Future[Any]] = [talking, self.ended]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not talking.done():
                talking.cancel()
                await asyncio.gather(talking, return_exceptions=True)
        if not talking.cancelled():
            return talking.result()
        raise self.ended.result()

    def _failure(self, status: Status, message: str, code: int | None = None) -> Result:
        calls = self.calls
        progress = calls.last_progress
        detail = f"child {message}"
        if code is not None:
            detail += f" ({describe_exit(code)})"
        return Result(
            summary=calls.last_text,
            status=status,
            turns=calls.turns,
            tool_calls=progress.tool_calls if progress else 0,
            usage=calls.usage,
            duration=round(asyncio.get_running_loop().time() - self.started, 3),
            error=detail,
        )

    def _finish(self, result: Result, process: ChildProcess | None) -> None:
        spans = result.spans  # for telemetry only: records and callers never see them
        result = msgspec.structs.replace(self.calls.accounted(result), spans=[])
        lines = self.stderr.last_lines()
        if result.status in ("crashed", "launch_failed") and lines:
            result = msgspec.structs.replace(
                result, error=result.error + "; last stderr: " + " | ".join(lines)
            )
        self.disk.ending = True  # the record of its end is always written
        finished = ChildFinished(
            child=self.id,
            agent=self.agent.name,
            description=self.request.description,
            pid=self.pid,
            transcript=self.transcript_label,
            result=result,
            exit_code=None if process is None else process.returncode,
            retries=self.calls.retries,
        )
        self._finished = finished
        self.emit(finished)
        if self.span is not None:
            assert self.sup.trace is not None
            self.sup.trace.child_finished(self.span, finished, spans, self.launcher.host_name)


async def _finish(drain: asyncio.Task[None], seconds: float = 1.0) -> None:
    """Let the stderr copy reach EOF; not waiting for a grandchild that escaped with the pipe.
    The copy has ended when this returns or raises (an interruption propagates)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drain, seconds)
