"""Starting, feeding and ending child processes.

Each child is ``python -m isoagent.child`` (or forked, ready, by the session's fork
server: ``parent/children/forkserver.py``) in a session of its own, with an environment
built from an allow-list (no credentials). The supervisor answers
its ``ModelCall`` frames through the gateway, records its conversation as a
transcript, forwards its progress, and ends its whole session when it is
done, times out, or the run is interrupted.

Where a child runs is its launcher's (``launchers.py``): this machine, or with
``--hosts`` a host that the placement (``placement.py``) picks, and another one when
that fails. The conversation is the same wherever it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from isoagent.child.agent.builtin_agents import BASE_TOOLS, TASK_TOOL
from isoagent.child.agent.loop import text_of
from isoagent.parent.children.call_limits import CallLimits
from isoagent.parent.children.child_hooks import ChildHooks, HookLedger, Subagent
from isoagent.parent.children.cleanup import describe_exit
from isoagent.parent.children.connection import FrameRefused, StderrLog, log_cap, write_frame
from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.large_results import ResultFiles
from isoagent.parent.children.launch import child_identity
from isoagent.parent.children.launchers import (
    CANCEL_GRACE,
    ChildFailed,
    ChildLauncher,
    Launchers,
)
from isoagent.parent.children.placement import attempt_stem
from isoagent.parent.children.planted import FOLDER_LIMIT, PlantedNames, may_write
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.sandbox_policy import PROTECTED, SandboxRefused, policy_for
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway
from isoagent.parent.records.events import ChildFinished, ChildProgress, ChildStarted, Event, Sink
from isoagent.parent.records.run_folder import RunFolder, TranscriptWriter
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.protocol import (
    PROTOCOL_VERSION,
    AgentSpec,
    Cancel,
    FrameError,
    Hello,
    HookCall,
    HookReply,
    Identity,
    McpCall,
    McpReply,
    Message,
    ModelCall,
    ModelError,
    ModelReply,
    Progress,
    Result,
    Status,
    Task,
    TaskCall,
    TaskReply,
    Usage,
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


# children that children may start in one run, in all (--max-depth 2 or more)
NESTED_CHILDREN = 64


def delegates(agent: AgentSpec) -> bool:
    """Whether a child of ``agent`` gets ``task`` when ``--max-depth`` allows: one with every
    base tool, as Claude Code's general-purpose (``tools: *``) has its delegation tool."""
    return set(BASE_TOOLS) <= set(agent.tools)


def child_id(number: int) -> str:
    """A child's id in its run: its number, as its transcript's name begins."""
    return f"{number:03d}"


def describe(prompt: str, width: int = 50) -> str:
    """A short title for the display and the transcript: the prompt's first line."""
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= width else line[: width - 3] + "..."


def unknown_type(name: str, agents: dict[str, AgentSpec]) -> str:
    """What a ``task`` call for an agent type there is not is told."""
    return f"unknown subagent_type {name!r}; choose one of: {', '.join(agents)}"


def ended_well(finished: ChildFinished) -> bool:
    """Whether its summary is an answer (its turns may have run out), not a failure's."""
    return finished.result.status in ("ok", "max_turns")


def report(finished: ChildFinished) -> str:
    """The child's summary plus one line of facts: all the parent's context gets."""
    result = finished.result
    facts = (
        f"{result.turns} turns, {result.tool_calls} tool calls, "
        f"{result.usage.total} tokens, {result.duration:.1f} s; transcript {finished.transcript}; "
        f"agentId {finished.child}"
    )
    if result.status == "ok":
        return f"{result.summary or '(no summary)'}\n\n[subagent {finished.agent} done: {facts}]"
    head = f"[subagent {finished.agent} {result.status}: {result.error}; {facts}]"
    if result.summary:
        return f"{result.summary}\n\n{head}"
    return head


class Supervisor:
    """Runs children for one session, at most ``settings.max_parallel`` at once."""

    def __init__(
        self,
        settings: Settings,
        *,
        gateway: Gateway,
        run: RunFolder,
        sink: Sink,
        fork_server: ForkServer | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.run_folder = run
        self.sink = sink
        self._slots = asyncio.Semaphore(settings.max_parallel)
        self._numbers = itertools.count(1)
        self.finished: list[ChildFinished] = []
        self.launchers = Launchers(settings, fork_server, run.run_id)
        self._running: set[asyncio.Task[ChildFinished]] = set()
        self._loop = asyncio.get_running_loop()
        self.live: dict[str, _ChildRun] = {}  # the children running, by id
        # every child asked for and not ended, by id: one not live waits for a slot or starts
        self._asked: dict[str, asyncio.Task[ChildFinished]] = {}
        self.nested = 0  # children that children started
        self.hooks: ChildHooks | None = None  # the session's, asked about its children
        self.planted = None
        self._planted_lock = asyncio.Lock()
        # the repositories and .claude folders below the workspace's top, read-only to
        # writing children: found once, before the first of them starts
        self.nested_protected: tuple[str, ...] = ()
        self.trace: RunTrace | None = None  # the run's telemetry, when on (the session's)
        if settings.sandbox != "off":
            roots = (settings.workdir, *settings.add_dirs)
            self.planted = PlantedNames(roots, run.path / "planted")

    async def run(self, request: ChildRequest) -> ChildFinished:
        """Run one child to its end; a failure becomes a Result, never an exception.
        Cancelling the caller ends the child, and returns once it is ended and recorded."""
        return await self.start(request)[1]

    def start(self, request: ChildRequest) -> tuple[str, asyncio.Task[ChildFinished]]:
        """Start one child without waiting for it (a background one): its id at once, and
        the task that runs it to its end, as ``run`` does; cancelling that task ends it."""
        number = next(self._numbers)
        child = child_id(number)
        run = asyncio.ensure_future(self._run(request, number))
        self._running.add(run)
        self._asked[child] = run
        run.add_done_callback(self._running.discard)
        run.add_done_callback(lambda _: self._asked.pop(child, None))
        return child, run

    @property
    def running(self) -> int:
        """Children asked for and not yet ended."""
        return len(self._running)

    async def end_all(self) -> None:
        """End every child still running and wait until each is ended and recorded. A
        session's children may run in tasks of their own (those of the parent's ``task``
        tool do), which no cancellation of the session's own task reaches."""
        running = list(self._running)
        for run in running:
            run.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def over_budget(self, pid: int, why: str) -> None:
        """From any thread (the egress proxy's): end the child ``pid`` of this machine,
        which broke a budget of the parent's; ``why`` becomes its error."""
        self._loop.call_soon_threadsafe(self._end_pid, pid, ChildFailed(why, "error"))

    def _end_pid(self, pid: int, failure: ChildFailed) -> None:
        for run in self.live.values():
            if run.pid == pid:
                run.end(failure)

    async def delegate(self, asking: _ChildRun, call: TaskCall) -> TaskReply:
        """A child's ``task`` call: a request, checked against the run's limits (depth,
        children in all, budget) before its child runs, as a process of this parent's."""
        depth, settings = asking.request.depth, self.settings
        if depth >= settings.max_depth:  # its Task gave it no task tool: a forged call
            why = f"asked for a child at depth {depth + 1}, past --max-depth {settings.max_depth}"
            asking.end(ChildFailed(why, "error"))
            return TaskReply(call.id, f"refused by the parent: {why}", is_error=True)
        agent = settings.agents.get(call.subagent_type)
        total = settings.max_tokens_total
        if agent is None:
            refusal = unknown_type(call.subagent_type, settings.agents)
        elif self.nested >= NESTED_CHILDREN:
            refusal = f"this run's children have started {NESTED_CHILDREN} children, its limit"
        elif total and self.gateway.usage.total >= total:
            refusal = f"the run's token budget ({total}) is used up"
        else:
            self.nested += 1
            finished = await self.run(ChildRequest(call.description, call.prompt, agent, depth + 1))
            return TaskReply(call.id, report(finished), not ended_well(finished))
        return TaskReply(call.id, refusal, is_error=True)

    def stop(self, child: str) -> bool:
        """End child ``child`` alone (the SDK's ``stop_task``), its status cancelled: the
        ``task`` call that started it returns that, and the parent goes on. False: no
        such child is running. One that has not started yet (a background child waiting for
        a slot) never starts."""
        run, asked = self.live.get(child), self._asked.get(child)
        if run is not None:
            run.end(ChildFailed("was stopped (stop_task)", "cancelled"))
        elif asked is not None:
            asked.cancel()
        return asked is not None

    async def _run(self, request: ChildRequest, number: int) -> ChildFinished:
        writing = self.planted is not None and may_write(request.agent, self.settings)
        # a child's child runs in the slot of its ancestor, which waits for it
        async with self._slots if request.depth == 1 else contextlib.nullcontext():
            if writing:
                await self._look_for_planted()
            finished = await self.launchers.run(
                number,
                lambda launcher, attempt: _ChildRun(self, request, number, launcher, attempt),
            )
        self.finished.append(finished)
        if writing:
            await self._move_planted(finished.child)
        return finished

    async def _look_for_planted(self) -> None:
        """Before the first writing child starts: what protected names there are."""
        assert self.planted is not None
        async with self._planted_lock:
            if self.planted.taken:
                return
            await asyncio.to_thread(self.planted.snapshot)
            kept = [n for n in PROTECTED if n != ".isoagent"]
            if self.settings.writable_git:
                kept.remove(".git")
            self.nested_protected = self.planted.nested(kept)
            if self.planted.partial:
                warn(
                    f"warning: more than {FOLDER_LIMIT} folders under the workspace: a .git "
                    "or .claude a child creates past them is not looked for"
                )

    async def _move_planted(self, child: str) -> None:
        assert self.planted is not None
        async with self._planted_lock:
            planted = self.planted
            moved = (
                planted.take(child)
                if planted.small
                else await asyncio.to_thread(planted.take, child)
            )
        for was, now in moved:
            what = (
                f"moved to {self.run_folder.display(now)}"
                if now is not None
                else "it could not be moved: remove it before anything runs there"
            )
            warn(
                f"warning: a child created {was}, which children may not create (it runs or "
                f"configures what comes next): {what}"
            )

    async def close(self) -> None:
        """End what outlives single children: host servers, ssh control masters."""
        await self.launchers.close()


class _ChildRun:
    """One child process, from spawn to its last byte of stderr; where it runs is its
    launcher's (``launchers.py``)."""

    def __init__(
        self,
        sup: Supervisor,
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
        self.transcript = TranscriptWriter(
            self.transcript_path, sup.run_folder.opener(self.transcript_path)
        )
        self.transcript_label = sup.run_folder.display(self.transcript_path)
        self.pid = 0
        self.last_progress: Progress | None = None
        self.recorder = ConversationRecorder(self.emit, self.id)
        self.usage = Usage()
        self.retries = 0  # of its model calls, by the gateway
        self.last_text = ""  # the child's latest words: its summary so far, if it fails
        self.cancelled = False
        self.started = asyncio.get_running_loop().time()
        self._finished: ChildFinished | None = None
        self.limits: CallLimits | None = None  # its model calls' limits, from its Task
        self._delegations: set[asyncio.Future[None]] = set()  # its task calls under way
        self.task: Task | None = None
        self.subagent = Subagent(self.id, self.agent.name, str(self.transcript_path))
        self.ledger: HookLedger | None = None  # what it asked the hooks, with a plan
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
            task = self.task = await self._task_with_hooks()
            self.limits = CallLimits(task)
            process = await launcher.start()
            process.frames.results = ResultFiles(self.sup.run_folder, self.transcript_path)
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
                )
            )
            result = await self._outcome(process, task)
        except ChildFailed as exc:
            result = self._failure(exc.status, str(exc))
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
        session's hooks about."""
        task = self._task()
        hooks = self.sup.hooks
        if hooks is None:
            return task
        context = await asyncio.to_thread(hooks.subagent_start, self.subagent)
        tools = [t for t in [*self.agent.tools, *self.agent.mcp_tools] if t != TASK_TOOL]
        plan = hooks.plan(tools, self.subagent)
        self.ledger = HookLedger(plan, task.limits.output_cap)
        prompt = "\n\n".join(filter(None, [task.prompt, context]))
        return msgspec.structs.replace(task, prompt=prompt, hooks=plan)

    def _task(self) -> Task:
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
            subagents=self._subagents(),
            trace=self.span is not None,
            history=list(self.request.history),
        )

    def _identity(self, tag: str, run_id: str) -> Identity:
        identity = child_identity(tag, run_id=run_id, child=self.id)
        return msgspec.structs.replace(identity, depth=identity.depth + self.request.depth - 1)

    def _subagents(self) -> dict[str, str]:
        """The agent types it may delegate to: none, unless ``--max-depth`` leaves it a level
        and its agent has every tool."""
        settings = self.sup.settings
        if self.request.depth >= settings.max_depth or not delegates(self.agent):
            return {}
        return {name: agent.description for name, agent in settings.agents.items()}

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
        self.cancelled = True
        if not await process.answer(Cancel(why)):  # and the call it was making, if any
            return failure
        with contextlib.suppress(TimeoutError, FrameError, ChildFailed):
            async with asyncio.timeout(CANCEL_GRACE):
                while True:
                    frame = await self._answer(process)
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
        return await launcher.watch(self._until_ended(self._talk(process)), process)

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

    async def _talk(self, process: ChildProcess) -> Result:
        try:
            while True:
                frame = await self._answer(process)
                if isinstance(frame, Result):
                    return frame
        finally:  # a child's child ends with it
            for delegation in self._delegations:
                delegation.cancel()
            await asyncio.gather(*self._delegations, return_exceptions=True)

    async def _answer(
        self, process: ChildProcess
    ) -> ModelCall | McpCall | HookCall | TaskCall | Progress | Result:
        """Take the next frame and act on it: answer a model call, forward progress."""
        frame = await process.frames.next()
        if frame is None:
            raise ChildFailed("exited before sending its Result")
        match frame:
            case ModelCall():
                assert self.limits is not None
                if refused := self.limits.refusal(frame):  # a child is untrusted
                    error = ModelError("bad_request", f"refused by the parent: {refused}")
                    await process.answer(ModelReply(frame.turn, error=error))
                    raise ChildFailed(
                        f"sent a model call its Task does not allow: {refused}", "error"
                    )
                if self.ledger is not None and (broke := self.ledger.refusal(frame.messages)):
                    raise ChildFailed(broke, "error")
                self.recorder.before(frame)
                if self.cancelled:  # it asked before it saw the Cancel: no more tokens for it
                    reply = ModelReply(frame.turn, error=ModelError("cancelled", "cancelled"))
                else:
                    reply = await self.sup.gateway.call(frame)
                self.recorder.after(frame, reply)
                self.usage = self.usage + reply.usage
                self.retries += reply.retries
                self.last_text = text_of(reply.content) or self.last_text
                if self.ledger is not None:
                    self.ledger.answered(reply)
                await process.answer(reply)
            case McpCall():
                answer = await self._call_sdk_tool(frame)
                await process.answer(answer)
            case TaskCall():  # its frames are read on while its child runs
                delegation = asyncio.ensure_future(self._delegate(process, frame))
                self._delegations.add(delegation)
                delegation.add_done_callback(self._delegations.discard)
            case HookCall():
                decided = await self._ask_hooks(frame)
                await process.answer(decided)
            case Progress():
                self.last_progress = frame
                event = ChildProgress(self.id, self.agent.name, self.request.description, frame)
                self.sup.sink(event)
            case Result():
                if self.ledger is not None and (broke := self.ledger.refusal(None)):
                    raise ChildFailed(broke, "error")
            case _:
                raise ChildFailed(f"sent an unexpected {type(frame).__name__} frame")
        return frame

    async def _delegate(self, process: ChildProcess, call: TaskCall) -> None:
        reply = await self.sup.delegate(self, call)
        await process.answer(reply)

    async def _call_sdk_tool(self, call: McpCall) -> McpReply:
        """A tool of an SDK's in-process server, for a child whose Task gives it (a child
        is untrusted), called through the SDK."""
        assert self.limits is not None
        if refused := self.limits.mcp_refusal(call):
            raise ChildFailed(f"called an MCP tool its Task does not give it: {refused}", "error")
        relay = self.sup.settings.mcp_servers.relay
        assert relay is not None  # a Task holds an SDK server's tools only once it was listed
        text, is_error = await asyncio.to_thread(relay, call.server, call.tool, call.arguments)
        return McpReply(call.id, text, is_error)

    async def _ask_hooks(self, call: HookCall) -> HookReply:
        """The session's hooks on one of the child's steps, one its Task's plan names (a
        child is untrusted)."""
        assert self.task is not None
        hooks = self.sup.hooks
        if hooks is None or not self.task.hooks.asks(call.event, call.tool):
            asked = f"{call.event} of {call.tool}" if call.tool else call.event
            raise ChildFailed(f"asked the hooks about what its Task does not: {asked}", "error")
        decided = await asyncio.to_thread(hooks.answer, call, self.subagent)
        if self.ledger is not None:
            self.ledger.heard(call, decided)
        return decided

    def _failure(self, status: Status, message: str, code: int | None = None) -> Result:
        progress = self.last_progress
        detail = f"child {message}"
        if code is not None:
            detail += f" ({describe_exit(code)})"
        return Result(
            summary=self.last_text,
            status=status,
            turns=progress.turns if progress else 0,
            tool_calls=progress.tool_calls if progress else 0,
            usage=self.usage,
            duration=round(asyncio.get_running_loop().time() - self.started, 3),
            error=detail,
        )

    def _finish(self, result: Result, process: ChildProcess | None) -> None:
        spans = result.spans  # for telemetry only: records and callers never see them
        result = msgspec.structs.replace(result, spans=[])
        lines = self.stderr.last_lines()
        if result.status in ("crashed", "launch_failed") and lines:
            result = msgspec.structs.replace(
                result, error=result.error + "; last stderr: " + " | ".join(lines)
            )
        finished = ChildFinished(
            child=self.id,
            agent=self.agent.name,
            description=self.request.description,
            pid=self.pid,
            transcript=self.transcript_label,
            result=result,
            exit_code=None if process is None else process.returncode,
            retries=self.retries,
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
