"""The parent agent's file tools, run by its hands: one process a session under a writing
child's sandbox (``child/hands.py``), as its bash commands run (``confine_command``).

The parent process keeps only what must hold authority (the key, the run folder, starting
sandboxes); what acts on the workspace for its agent runs confined. The hands starts at
the first file-tool call (a run that makes none pays nothing): forked by the session's fork
server, pid 1 of its own namespace (a few milliseconds), or, without one, started as a
command (an interpreter's start). It serves the session's calls one at a time, each a
``ToolRun`` frame and its ``ToolDone``. A call cancelled (the run's interrupt) ends the
process, as does one that ends it (its CPU limit, a crash): the call's result says so,
and the next call starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import FileIO
from typing import Any, Protocol

import msgspec

from isoagent.child.agent.tools.base import Tool, ToolOutput, ToolWrapper
from isoagent.child.confine_command import Confinement
from isoagent.child.hands import HANDED
from isoagent.parent.children.cleanup import describe_exit
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable, running
from isoagent.parent.children.launch import CHILD_COMMAND, PACKAGE_ROOT
from isoagent.protocol import FrameError, FrameWriter
from isoagent.protocol.framing import FrameAssembler
from isoagent.protocol.hands import FromHands, Ready, ToolDone, ToolRun

HANDS_COMMAND = [*CHILD_COMMAND[:-1], "isoagent.child.hands"]
HANDS_LOG = "parent-tools.stderr.log"  # its stderr, in the run folder
START_TIMEOUT = 30.0  # seconds from its start to its Ready
_CHECK_EVERY = 0.1  # seconds between checks for a cancel while a call runs
_END_GRACE = 2.0  # seconds it has to exit once its stdin closes


class HandsFailed(Exception):
    """The hands could not start or ended during a call; the message says how."""


class _Process(Protocol):
    """The hands' process, however it was started."""

    pid: int

    def ended(self) -> bool: ...

    def wait(self, timeout: float) -> int | None:
        """Its returncode once it ended, within ``timeout`` seconds (None: not known)."""
        ...


class _Started:
    """Started as a command (``subprocess``)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid

    def ended(self) -> bool:
        return self.process.poll() is not None

    def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        return self.process.returncode


@dataclass
class _Forked:
    """Forked by the session's fork server, which reaps it and says how it ended (``exit``,
    settled on the session's loop). Watched from here, not on the loop: the loop's own
    thread may wait for it (a close)."""

    pid: int
    exit: asyncio.Future[int | None]

    def ended(self) -> bool:
        return self.exit.done() or not running(self.pid)

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while not self.exit.done() and time.monotonic() < deadline:
            if not running(self.pid):
                deadline = min(deadline, time.monotonic() + 0.2)  # its exit's word, soon
            time.sleep(0.01)
        return self.exit.result() if self.exit.done() else None


class Hands:
    """The parent's hands for one session: ``confinement`` is a writing child's sandbox,
    ``env`` its environment (an allow-list), ``log`` opens its stderr log; ``fork_server``
    (on ``loop``, the session's event loop) forks it, if there is one."""

    def __init__(
        self,
        confinement: Confinement,
        env: dict[str, str],
        log: Callable[[], FileIO],
        fork_server: ForkServer | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.spec = msgspec.json.encode(confinement).decode()
        self.pid_namespace = confinement.policy.pid_namespace
        self.env = env
        self.fork_server = fork_server
        self.loop = loop
        self._open_log = log
        self._log: FileIO | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._process: _Process | None = None
        self._writer: FrameWriter | None = None
        self._reading = -1  # its stdout's read end
        self._frames = FrameAssembler(FromHands)

    @property
    def pid(self) -> int:
        """Its process's pid, as this process sees it (0: none runs)."""
        return 0 if self._process is None else self._process.pid

    def run(self, tool: str, args: dict[str, Any], cancelled: threading.Event) -> ToolOutput:
        """``tool``'s call with ``args``, run by the hands (started if need be)."""
        with self._lock:
            try:
                return self._run(tool, args, cancelled)
            except HandsFailed as exc:
                self._end()
                return ToolOutput(f"{tool} failed: {exc}", is_error=True)

    def _run(self, tool: str, args: dict[str, Any], cancelled: threading.Event) -> ToolOutput:
        if self._process is not None and self._process.ended():
            self._end()  # it ended between calls (killed, its CPU limit): a new one
        if self._process is None:
            self._start(cancelled)
        assert self._writer is not None
        call = ToolRun(next(self._ids), tool, args)
        try:
            self._writer.write(call)
        except OSError as exc:
            raise HandsFailed(self._ended(f"its process took no call ({exc.strerror})")) from None
        done = self._read(cancelled, None)
        if not isinstance(done, ToolDone) or done.id != call.id:
            raise HandsFailed(self._ended(f"its process answered {type(done).__name__}"))
        return ToolOutput(done.text, done.is_error)

    def _start(self, cancelled: threading.Event) -> None:
        if self._log is None:
            self._log = self._open_log()
        stdin, self._writer = _pipe_to_write()
        self._reading, stdout = os.pipe()
        try:
            self._process = self._launch([stdin, stdout, self._log.fileno()])
        finally:
            os.close(stdin)
            os.close(stdout)
        self._frames = FrameAssembler(FromHands)
        ready = self._read(cancelled, time.monotonic() + START_TIMEOUT)
        if not isinstance(ready, Ready):
            raise HandsFailed(self._ended(f"its process said {type(ready).__name__} first"))
        if ready.error:
            raise HandsFailed(ready.error)

    def _launch(self, fds: list[int]) -> _Process:
        """Fork it from the fork server, or else start it as a command, on ``fds``."""
        if self.fork_server is not None and self.loop is not None:
            forking = self.fork_server.fork(
                self.env, PACKAGE_ROOT, fds, pid_namespace=self.pid_namespace,
                program="hands", args=[self.spec],
            )  # fmt: skip
            try:
                pid, exit = asyncio.run_coroutine_threadsafe(forking, self.loop).result()
                return _Forked(pid, exit)
            except ForkServerUnavailable:
                pass  # said once by the server: started as a command
            except OSError as exc:
                raise HandsFailed(f"its process could not be forked: {exc}") from None
        try:
            process = subprocess.Popen(
                [*HANDS_COMMAND, self.spec], stdin=fds[0], stdout=fds[1], stderr=fds[2],
                cwd=PACKAGE_ROOT, env=self.env, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise HandsFailed(f"its process could not start: {exc.strerror or exc}") from None
        return _Started(process)

    def _read(self, cancelled: threading.Event, deadline: float | None) -> object:
        """The next frame the hands sends; a cancel or the deadline ends it (HandsFailed)."""
        poller = select.poll()
        poller.register(self._reading, select.POLLIN)
        while True:
            if cancelled.is_set():
                raise HandsFailed("cancelled")
            if deadline is not None and time.monotonic() > deadline:
                raise HandsFailed(f"its process did not start within {START_TIMEOUT:g} s")
            if not poller.poll(_CHECK_EVERY * 1000):
                continue
            try:
                count = os.readv(self._reading, [self._frames.buffer()])
                if not count:
                    self._frames.end()
                    raise HandsFailed(self._ended("its process ended"))
                if (frame := self._frames.advance(count)) is not None:
                    return frame
            except FrameError as exc:
                raise HandsFailed(self._ended(f"its process sent {exc}")) from None

    def _ended(self, what: str) -> str:
        """``what`` happened, with how the process ended, once it has."""
        assert self._process is not None
        code = self._process.wait(_END_GRACE)
        how = "it ended" if code is None and self._process.ended() else describe_exit(code)
        return f"{what} ({how}) while running the call"

    def _end(self) -> None:
        """End the process now, whatever it is doing, and close its pipes."""
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(_END_GRACE)
        if self._writer is not None:
            os.close(self._writer.fd)
            self._writer = None
        if self._reading >= 0:
            os.close(self._reading)
            self._reading = -1

    def close(self) -> None:
        """End the hands (from any thread): it exits when its stdin closes."""
        with self._lock:
            if self._writer is not None:
                os.close(self._writer.fd)
                self._writer = None
                if self._process is not None:
                    self._process.wait(_END_GRACE)
            self._end()
            if self._log is not None:
                self._log.close()
                self._log = None


def _pipe_to_write() -> tuple[int, FrameWriter]:
    """A pipe: its read end (for the hands), a frame writer on its write end (ours)."""
    reading, writing = os.pipe()
    return reading, FrameWriter(writing)


class HandedTool(ToolWrapper):
    """``tool`` (a file tool), whose calls its session's hands run."""

    def __init__(self, tool: Tool[Any], hands: Hands) -> None:
        super().__init__(tool)
        self.hands = hands

    def run(self, args: dict[str, Any]) -> ToolOutput:
        return self.hands.run(self.name, args, self.ctx.cancelled)


def handed(tools: Sequence[Tool[Any]], hands: Hands | None) -> list[Tool[Any]]:
    """``tools``, those of them ``HANDED`` run by ``hands`` (None: in this process, as when
    the parent's commands run unsandboxed too)."""
    if hands is None:
        return list(tools)
    return [HandedTool(tool, hands) if isinstance(tool, HANDED) else tool for tool in tools]
