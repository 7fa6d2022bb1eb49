"""The parent's side of a host server (``child/hostserver.py``): a warm start per host.

One ``HostLink`` per host runs its host server through the launcher, once, and makes
every child on that host a channel on that one link: the child is forked there, and
its stdin, stdout and stderr travel as frames. The supervisor sees a ``ChildProcess``
as for any other child. When the link ends (the launcher exits, the connection is
cut, or the server stops saying anything for a heartbeat) every child on it ends with
``LINK_FAILED`` as its exit code, as a child behind a failed ssh would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from isoagent.parent.children.connection import FrameInbox
from isoagent.parent.children.process import ChildProcess
from isoagent.protocol import FrameError, encode_frame
from isoagent.protocol.framing import FrameAssembler
from isoagent.protocol.hostserver import (
    STDERR,
    STDIN,
    STDOUT,
    Closed,
    Data,
    FromServer,
    Open,
    Opened,
    OpenFailed,
    Ping,
    Ready,
)

LINK_FAILED = 255
CHUNK = 1 << 16
KILL_GRACE = 1.0


class LinkFailed(Exception):
    """The host server could not be started, or its link is gone; the message says how."""


class _Channel:
    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.frames = FrameInbox()
        self.stderr = asyncio.StreamReader()
        self.exit: asyncio.Future[int | None] = loop.create_future()
        self.opened: asyncio.Future[int] = loop.create_future()
        self.stderr_ended = False

    def end(self, returncode: int) -> None:
        """The child is gone (or out of reach): everything it had to say has been said."""
        self.frames.eof_received()
        self.stderr.feed_eof()
        if not self.exit.done():
            self.exit.set_result(returncode)
        if not self.opened.done():
            self.opened.set_exception(LinkFailed("the link ended"))


class _ChannelStdin(asyncio.WriteTransport):
    """A child's stdin, as a transport: bytes written become ``Data`` frames on the link."""

    def __init__(self, link: HostLink, channel: int) -> None:
        super().__init__()
        self._link = link
        self._channel = channel
        self._closed = False

    def write(self, data: Any) -> None:
        if not self._closed and data:
            self._link.send(Data(self._channel, STDIN, bytes(data)))

    def is_closing(self) -> bool:
        return self._closed or self._link.broken != ""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._link.send(Data(self._channel, STDIN, b""))  # its stdin's end

    def abort(self) -> None:
        self.close()

    def get_write_buffer_size(self) -> int:
        return 0


class HostLink:
    """One host server, started through ``argv``; ``spawn`` starts a child on it."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], heartbeat: float) -> None:
        self.argv = list(argv)
        self.env = env
        self.heartbeat = heartbeat
        self.broken = ""  # why the link is gone
        self.process: asyncio.subprocess.Process | None = None
        self._channels: dict[int, _Channel] = {}
        self._ids = itertools.count(1)
        self._ready: asyncio.Future[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._stderr: deque[bytes] = deque(maxlen=16)
        self._tasks: list[asyncio.Task[None]] = []
        self._heard = time.monotonic()  # when the server last said anything

    async def spawn(self, timeout: float) -> ChildProcess:
        """A child forked by the host server, once it is up (within ``timeout`` seconds
        of its start); ``LinkFailed`` when it cannot be."""
        if self.broken:
            raise LinkFailed(self.broken)
        await self._start()
        assert self._ready is not None
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._ready)
        except TimeoutError:
            self.fail(f"the host server said nothing within {timeout:g} s")
        if self.broken:
            raise LinkFailed(self.broken)
        number = next(self._ids)
        channel = self._channels[number] = _Channel()
        self.send(Open(number))
        try:
            pid = await channel.opened
        except (LinkFailed, OSError) as exc:
            self._channels.pop(number, None)
            raise LinkFailed(self.broken or str(exc)) from None
        loop = asyncio.get_running_loop()
        stdin = _ChannelStdin(self, number)
        writer = asyncio.StreamWriter(stdin, asyncio.streams.FlowControlMixin(), None, loop)
        channel.exit.add_done_callback(lambda _: channel.frames.child_exited())
        return ChildProcess(pid, writer, channel.frames, channel.stderr, channel.exit, [stdin])

    async def _start(self) -> None:
        if self._starting is None:  # the first child starts it; the others wait for it
            self._starting = asyncio.ensure_future(self._launch())
        await asyncio.shield(self._starting)

    async def _launch(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            self.fail(f"could not run the launcher {self.argv[0]}: {exc}")
            raise LinkFailed(self.broken) from None
        self._tasks = [
            asyncio.ensure_future(self._read(self.process)),
            asyncio.ensure_future(self._keep_stderr(self.process)),
            asyncio.ensure_future(self._ping()),
        ]

    def send(self, frame: Open | Data | Ping) -> None:
        process = self.process
        if self.broken or process is None or process.stdin is None:
            return
        if process.stdin.is_closing():
            return
        process.stdin.write(encode_frame(frame))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        frames = FrameAssembler(FromServer)
        why = "the host server's link ended"
        try:
            while data := await process.stdout.read(CHUNK):
                for frame in frames.feed(data):
                    self._dispatch(frame)  # type: ignore[arg-type]
        except FrameError as exc:
            why = f"the host server sent garbage ({exc})"
            if self._ready is not None and not self._ready.done():
                why += ": does the login there print to stdout (a .bashrc that should not)?"
        await asyncio.sleep(0.05)  # its launcher's last words (ssh: ...) on stderr
        code = process.returncode
        if code is None:
            with contextlib.suppress(TimeoutError):
                code = await asyncio.wait_for(process.wait(), KILL_GRACE)
        if code is not None:
            why += f" (exit code {code})"
        self.fail(why)

    def _dispatch(self, frame: Ready | Opened | OpenFailed | Data | Closed | Ping) -> None:
        self._heard = time.monotonic()
        if isinstance(frame, Ping):
            return
        if isinstance(frame, Ready):
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            return
        channel = self._channels.get(frame.channel)
        if channel is None:
            return
        if isinstance(frame, Opened):
            channel.opened.set_result(frame.pid)
        elif isinstance(frame, OpenFailed):
            channel.opened.set_exception(OSError(frame.error))
        elif isinstance(frame, Closed):  # its stderr may still have bytes on their way
            if not channel.exit.done():
                channel.exit.set_result(frame.returncode)
            if channel.stderr_ended:
                self._channels.pop(frame.channel, None)
        elif frame.stream == STDOUT:
            if frame.data:
                channel.frames.data_received(frame.data)
            else:
                channel.frames.eof_received()
        elif frame.stream == STDERR:
            if frame.data:
                channel.stderr.feed_data(frame.data)
            else:
                channel.stderr.feed_eof()
                channel.stderr_ended = True
                if channel.exit.done():
                    self._channels.pop(frame.channel, None)

    async def _keep_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            self._stderr.append(line)

    async def _ping(self) -> None:
        """Ping every third of the heartbeat; a server silent for a heartbeat (once it is
        up: a queue's wait is the launch timeout's) means the link is dead."""
        while not self.broken:
            await asyncio.sleep(self.heartbeat / 3)
            up = self._ready is not None and self._ready.done()
            if up and time.monotonic() - self._heard > self.heartbeat:
                self.fail(f"nothing heard from the host for {self.heartbeat:g} s")
            self.send(Ping())

    def last_words(self) -> str:
        """The launcher's (and host server's) last stderr lines, for an error message."""
        text = b"".join(self._stderr).decode("utf-8", "replace")
        return " | ".join(line for line in text.splitlines() if line.strip())

    def fail(self, why: str) -> None:
        """End the link: every child on it ends, unreachable, with ``LINK_FAILED``."""
        if self.broken:
            return
        if words := self.last_words():
            why += f"; last stderr: {words}"
        self.broken = why
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)  # spawn sees self.broken
        for channel in list(self._channels.values()):
            channel.end(LINK_FAILED)
        self._channels.clear()
        self._kill()

    def _kill(self) -> None:
        """SIGKILL the launcher's session (ssh, and a ProxyCommand it may have started)."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def close(self) -> None:
        """End the host server: its stdin's end ends it, and its children with it."""
        for task in self._tasks:
            if task is not self._tasks[0]:
                task.cancel()
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), KILL_GRACE)
        except TimeoutError:
            self._kill()
            await process.wait()
        self.broken = self.broken or "closed"
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
