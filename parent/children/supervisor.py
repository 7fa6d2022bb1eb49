"""Starting, feeding and ending child processes.

Each child is ``python -m isoagent.child`` (or forked, ready, by the session's fork
server: ``parent/children/forkserver.py``) in a session of its own, with an environment
built from an allow-list (no credentials). The supervisor answers
its ``ModelCall`` frames through the gateway, records its conversation as a
transcript, forwards its progress, and ends its whole session when it is
done, times out, or the run is interrupted.

With ``--hosts`` the supervisor's ``Placement`` (``placement.py``) picks each child's
host, starts it there, and tries it again elsewhere when that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import tempfile
from dataclasses import dataclass

import msgspec

from isoagent.child.agent.loop import text_of
from isoagent.child.agent.proc import start_time
from isoagent.parent.children.cgroups import ChildCgroup, RunCgroups
from isoagent.parent.children.cleanup import describe_exit, end_session
from isoagent.parent.children.connection import StderrLog, log_cap, write_frame
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable
from isoagent.parent.children.hosts import HostEntry
from isoagent.parent.children.launch import (
    CHILD_COMMAND,
    PACKAGE_ROOT,
    child_environment,
    child_identity,
    exec_child,
)
from isoagent.parent.children.placement import LauncherFailed, Placement, attempt_stem
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.remote import LINK_FAILED, keep_link
from isoagent.parent.children.remote_server import HostLink, LinkFailed
from isoagent.parent.children.sandbox_policy import (
    SandboxRefused,
    protected_paths,
    sandbox_mode,
)
from isoagent.parent.events import ChildFinished, ChildProgress, ChildStarted, Event, Sink
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.gateway import Gateway
from isoagent.parent.run_folder import RunFolder, TranscriptWriter
from isoagent.parent.settings import Settings
from isoagent.protocol import (
    PROTOCOL_VERSION,
    AgentSpec,
    Cancel,
    FrameError,
    Hello,
    ModelCall,
    ModelError,
    ModelReply,
    Progress,
    Result,
    Status,
    Task,
    Usage,
)

HELLO_TIMEOUT = 30.0
CANCEL_GRACE = 2.0  # seconds a cancelled child has to send its Result


class ChildFailed(Exception):
    """The child broke the protocol or ended early; the message says how."""

    def __init__(self, message: str, status: Status = "crashed") -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ChildRequest:
    description: str
    prompt: str
    agent: AgentSpec


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
        self.fork_server = fork_server
        self.placement = None if settings.remote is None else Placement(settings.remote)
        self.gateway = gateway
        self.child_command = settings.child_command or CHILD_COMMAND
        self.run_folder = run
        self.sink = sink
        self._slots = asyncio.Semaphore(settings.max_parallel)
        self._numbers = itertools.count(1)
        self.finished: list[ChildFinished] = []
        self.cgroups = RunCgroups.open()
        self._running: set[asyncio.Task[ChildFinished]] = set()

    async def run(self, request: ChildRequest) -> ChildFinished:
        """Run one child to its end; a failure becomes a Result, never an exception.
        Cancelling the caller ends the child, and returns once it is ended and recorded."""
        run = asyncio.ensure_future(self._run(request))
        self._running.add(run)
        run.add_done_callback(self._running.discard)
        return await run

    async def end_all(self) -> None:
        """End every child still running and wait until each is ended and recorded. A
        session's children may run in tasks of their own (those of the parent's ``task``
        tool do), which no cancellation of the session's own task reaches."""
        running = list(self._running)
        for run in running:
            run.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _run(self, request: ChildRequest) -> ChildFinished:
        async with self._slots:
            number = next(self._numbers)
            if self.placement is None:
                finished = await _ChildRun(self, request, number).run()
            else:
                finished = await self.placement.run(
                    lambda host, attempt, refused: _ChildRun(
                        self, request, number, host, attempt, refused
                    )
                )
        self.finished.append(finished)
        return finished

    async def close(self) -> None:
        """End what outlives single children: host servers, ssh control masters."""
        if self.placement is not None:
            await self.placement.close()


class _ChildRun:
    """One child process, from spawn to its last byte of stderr."""

    def __init__(
        self,
        sup: Supervisor,
        request: ChildRequest,
        number: int,
        host: HostEntry | None = None,
        attempt: int = 0,
        refused: str = "",
    ) -> None:
        self.sup = sup
        self.request = request
        self.agent = request.agent
        self.id = f"{number:03d}"
        self.host = host
        # started through the launcher, on another host (or where the engine puts it)
        self.remote = sup.settings.remote if host is not None and not host.is_local else None
        self.refused = refused  # why it cannot be started at all
        self.launched: bool | None = None  # for a remote child: whether it said Hello
        self.link_lost = False
        self.link: HostLink | None = None  # its host server's, when it is a channel on one
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
        self.born = 0  # its start_time: what it started began later
        self.cgroup: ChildCgroup | None = None
        self.last_progress: Progress | None = None
        self.recorder = ConversationRecorder(self.emit, self.id)
        self.usage = Usage()
        self.last_text = ""  # the child's latest words: its summary so far, if it fails
        self.cancelled = False
        self.started = asyncio.get_running_loop().time()
        self._finished: ChildFinished | None = None

    def emit(self, event: Event) -> None:
        self.transcript(event)
        self.sup.sink(event)

    async def run(self) -> ChildFinished:
        # a remote child makes its own, on its host; locally, its tag is its temp folder
        tmpdir = "" if self.remote else tempfile.mkdtemp(prefix=f"isoagent-{self.id}-")
        process: ChildProcess | None = None
        drain: asyncio.Task[None] | None = None
        result: Result | None = None
        try:
            task = self._task(tmpdir)
            process = await self._spawn(tmpdir)
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
                    host="" if self.host is None else self.host.name,
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
                if process is not None and self.link is not None:
                    await asyncio.shield(self._end_channel(process))
                elif process is not None:
                    ending = end_session(process, tmpdir, self.born, cgroup=self.cgroup)
                    await asyncio.shield(ending)
                if drain is not None:
                    await _finish(drain)
            finally:
                if drain is not None:
                    drain.cancel()
                if process is not None:  # a grandchild may still hold the pipes
                    process.close_pipes()
                if result is not None:
                    self._finish(result, process)
                self.transcript.close()
                if tmpdir:
                    shutil.rmtree(tmpdir, ignore_errors=True)
        assert self._finished is not None
        return self._finished

    def _task(self, tmpdir: str) -> Task:
        sup = self.sup
        try:
            sandbox = sandbox_mode(self.agent, sup.settings.sandbox, sup.settings.allow_unsandboxed)
        except SandboxRefused as exc:
            raise ChildFailed(f"was not started: {exc}", "error") from None
        settings = sup.settings
        limits = msgspec.structs.replace(
            settings.limits,
            max_turns=self.agent.max_turns or settings.limits.max_turns,
            sandbox=sandbox,
            protected=protected_paths(
                sandbox,
                settings.workdir,
                settings.runs_dir,
                settings.writable_git,
                settings.add_dirs,
            ),
        )
        run_id = sup.run_folder.run_id
        remote = self.remote  # a remote child makes its own tmpdir there: tmpdir is ""
        # a local child's tag is its temp folder; a remote one's is unique on any host
        tag = tmpdir if remote is None else f"isoagent-{run_id}-{self.transcript_path.stem}"
        return Task(
            prompt=self.request.prompt,
            agent=self.agent,
            model=self.agent.model or settings.model,
            workdir=(remote.remote_workdir if remote else "") or str(settings.workdir),
            tmpdir=tmpdir,
            limits=limits,
            identity=child_identity(tag, run_id=run_id, child=self.id),
            heartbeat=0.0 if remote is None else remote.heartbeat,
            add_dirs=[str(path) for path in settings.add_dirs],
        )

    async def _spawn(self, tmpdir: str) -> ChildProcess:
        if self.refused:
            raise ChildFailed(f"was not started: {self.refused}", "launch_failed")
        if self.remote is not None:
            return await self._launch()
        env = child_environment(tmpdir)
        command = self.sup.child_command
        process: ChildProcess | None = None
        if self.sup.fork_server is not None:
            with contextlib.suppress(ForkServerUnavailable):
                try:
                    process = await self.sup.fork_server.spawn(env, PACKAGE_ROOT)
                except OSError as exc:
                    raise ChildFailed(f"could not be forked: {exc}") from None
        if process is None:
            try:
                process = await exec_child(command, cwd=PACKAGE_ROOT, env=env)
            except OSError as exc:
                raise ChildFailed(f"could not be started ({' '.join(command)}): {exc}") from None
        self.pid = process.pid
        self.born = start_time(process.pid)
        limits = self.sup.settings.limits  # the child waits for its Task: it started nothing yet
        self.cgroup = self.sup.cgroups.join(
            f"child-{self.id}-{self.pid}",
            process.pid,
            limits.max_processes,
            limits.address_space_mb,
        )
        return process

    async def _launch(self) -> ChildProcess:
        """Start the child on its host, through the supervisor's placement."""
        assert self.sup.placement is not None and self.host is not None
        try:
            process, self.link = await self.sup.placement.launch(
                self.host, self.sup.settings.workdir
            )
        except LinkFailed as exc:
            raise self._not_started(str(exc)) from None
        except LauncherFailed as exc:
            self.launched = False
            raise ChildFailed(str(exc), "launch_failed") from None
        self.pid = process.pid  # on its host, or the launcher's (the child's is there)
        return process

    async def _outcome(self, process: ChildProcess, task: Task) -> Result:
        """The child's Result, or one that says how the child failed."""
        try:
            try:
                async with asyncio.timeout(self.sup.settings.timeout):
                    result = await self._converse(process, task)
            except TimeoutError:
                why = f"timed out after {self.sup.settings.timeout:g} s"
                result = await self._cancel(process, why)
            await process.wait_exit(1.0)  # after its Result a child exits by itself
            return result
        except FrameError as exc:
            return self._failure("crashed", f"sent a corrupt frame: {exc}")
        except ChildFailed as exc:
            await process.wait_exit(1.0)
            message = str(exc)
            if (
                self.launched
                and not self.link_lost
                and exc.status == "crashed"
                and process.returncode == LINK_FAILED
            ):
                self.link_lost = True  # ssh's code for a dropped connection
                message = f"lost its link to host {self._host_name}: {message}"
            return self._failure(exc.status, message, process.returncode)

    async def _cancel(self, process: ChildProcess, why: str) -> Result:
        """Ask the child to stop (Cancel) and take the Result it sends within a moment."""
        failure = self._failure("timeout", why)
        self.cancelled = True
        if not await write_frame(process.stdin, Cancel(why)):
            return failure
        with contextlib.suppress(TimeoutError, FrameError, ChildFailed):
            async with asyncio.timeout(CANCEL_GRACE):
                while True:
                    frame = await self._answer(process)
                    if isinstance(frame, Result):
                        return msgspec.structs.replace(frame, status="timeout", error=failure.error)
        return failure

    async def _converse(self, process: ChildProcess, task: Task) -> Result:
        # a remote child's launch (a queue's wait included) ends with its Hello
        hello_timeout = HELLO_TIMEOUT if self.remote is None else self.remote.launch_timeout
        try:
            async with asyncio.timeout(hello_timeout):
                hello = await process.frames.next()
        except TimeoutError:
            raise self._not_started(f"sent no Hello within {hello_timeout:g} s") from None
        except FrameError as exc:
            if self.remote is None:
                raise
            why = f"sent bytes that are not a frame ({exc}): does the login print to stdout?"
            raise self._not_started(why) from None
        if hello is None:
            raise self._not_started("exited before saying Hello")
        if self.remote:
            self.launched = True
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
        if self.remote is None:
            return await self._talk(process)
        talk = asyncio.ensure_future(self._talk(process))
        watch = asyncio.ensure_future(keep_link(process.stdin, process.frames, task.heartbeat))
        try:
            await asyncio.wait([talk, watch], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for part in (talk, watch):
                part.cancel()
            await asyncio.gather(talk, watch, return_exceptions=True)
        if not talk.cancelled():
            return talk.result()
        self.link_lost = True
        raise ChildFailed(
            f"lost its link to host {self._host_name}: nothing heard for {task.heartbeat:g} s"
        )

    async def _talk(self, process: ChildProcess) -> Result:
        while True:
            frame = await self._answer(process)
            if isinstance(frame, Result):
                return frame

    @property
    def _host_name(self) -> str:
        return "" if self.host is None else self.host.name

    async def _end_channel(self, process: ChildProcess) -> None:
        """End a child on a host server: its stdin's end tells it to end itself and what
        it started, there (its pid is a pid there: nothing here may be signalled)."""
        process.close_pipes()
        await process.wait_exit(CANCEL_GRACE)

    def _not_started(self, why: str) -> ChildFailed:
        if self.remote is None:
            return ChildFailed(why)
        self.launched = False
        return ChildFailed(f"did not start on host {self._host_name}: {why}", "launch_failed")

    async def _answer(self, process: ChildProcess) -> ModelCall | Progress | Result:
        """Take the next frame and act on it: answer a model call, forward progress."""
        frame = await process.frames.next()
        if frame is None:
            raise ChildFailed("exited before sending its Result")
        match frame:
            case ModelCall():
                self.recorder.before(frame)
                if self.cancelled:  # it asked before it saw the Cancel: no more tokens for it
                    reply = ModelReply(frame.turn, error=ModelError("cancelled", "cancelled"))
                else:
                    reply = await self.sup.gateway.call(frame)
                self.recorder.after(frame, reply)
                self.usage = self.usage + reply.usage
                self.last_text = text_of(reply.content) or self.last_text
                await write_frame(process.stdin, reply)
            case Progress():
                self.last_progress = frame
                event = ChildProgress(self.id, self.agent.name, self.request.description, frame)
                self.sup.sink(event)
            case Result():
                pass
            case _:
                raise ChildFailed(f"sent an unexpected {type(frame).__name__} frame")
        return frame

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
        )
        self._finished = finished
        self.emit(finished)


async def _finish(drain: asyncio.Task[None], seconds: float = 1.0) -> None:
    """Let the stderr copy reach EOF; not waiting for a grandchild that escaped with the pipe.
    The copy has ended when this returns or raises (an interruption propagates)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drain, seconds)
