"""``python -m isoagent.child.hostserver``: the warm start of one remote host.

The parent starts it once per host for the run, through the launcher (``ssh host``,
``kubectl exec -i pod``, ``srun -w node``); its stdin and stdout carry the frames of
``protocol/hostserver.py``. Preloaded as the local fork server is, it forks a child
for each ``Open`` (a session of its own, on pipes of its own, exactly as
``python -m isoagent.child`` would run) and carries every child's stdin, stdout and
stderr over its one link as ``Data`` frames, so a child on a warm host costs a fork
and a round trip, not a login. It ends when its stdin ends (the parent or the link
is gone): it closes every child's stdin, and each child, at that EOF, ends itself
and what it started.
"""

from __future__ import annotations

import os
import selectors
import sys
import time
from dataclasses import dataclass, field

from isoagent.child import sandbox
from isoagent.child.forkserver import become_child, preload, reaped, wake_on_child_exit
from isoagent.child.main import take_protocol_fd
from isoagent.protocol import PROTOCOL_VERSION, FrameError, FrameWriter
from isoagent.protocol.forkserver import Spawn
from isoagent.protocol.framing import FrameAssembler
from isoagent.protocol.hostserver import (
    STDERR,
    STDOUT,
    Closed,
    Data,
    Open,
    Opened,
    OpenFailed,
    Ping,
    Ready,
    ToServer,
)

CHUNK = 1 << 16


@dataclass
class _Child:
    channel: int
    pid: int
    stdin: int  # our end of its stdin (-1 once closed)
    stdout_open: bool = True
    returncode: int | None = None
    pending: bytearray = field(default_factory=bytearray)  # for its stdin, not yet taken
    stdin_closing: bool = False  # close its stdin once ``pending`` is written


class HostServer:
    def __init__(self, out: FrameWriter, heartbeat: float) -> None:
        self.out = out
        self.heartbeat = heartbeat  # 0: no limit to the parent's silence
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, _Child] = {}  # by channel
        self.by_pid: dict[int, _Child] = {}

    def serve(self) -> None:
        wake_read = wake_on_child_exit()
        preload()
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, "parent")
        self.selector.register(wake_read, selectors.EVENT_READ, "wake")
        frames = FrameAssembler(ToServer)
        self.out.write(Ready(PROTOCOL_VERSION))
        heard = time.monotonic()
        while True:
            ready = self.selector.select(self.heartbeat / 3 if self.heartbeat else None)
            if self.heartbeat and time.monotonic() - heard > self.heartbeat:
                print(
                    f"isoagent host server: parent silent for {self.heartbeat:g} s", file=sys.stderr
                )
                return
            for key, events in ready:
                what = key.data
                if what == "parent":
                    data = _read(0)
                    if data is None:
                        continue
                    if not data:
                        return  # the parent or the link is gone
                    heard = time.monotonic()
                    for frame in frames.feed(data):
                        self._handle(frame)  # type: ignore[arg-type]
                elif what == "wake":
                    self._reap(wake_read)
                elif events & selectors.EVENT_WRITE:
                    self._flush(what)
                else:
                    self._output(key.fd, *what)

    def _handle(self, frame: Open | Data | Ping) -> None:
        if isinstance(frame, Ping):
            self.out.write(frame)  # the parent watches the link by these
            return
        if isinstance(frame, Open):
            self._open(frame.channel)
            return
        child = self.children.get(frame.channel)
        if child is None or child.stdin < 0 or child.stdin_closing:
            return  # it has ended; what was on its way to it does not matter
        if frame.data:
            child.pending += frame.data
        else:
            child.stdin_closing = True
        self._flush(child)

    def _open(self, channel: int) -> None:
        pipes: list[int] = []
        try:
            for _ in range(3):
                pipes.extend(os.pipe())
            pid = os.fork()
        except OSError as exc:
            for fd in pipes:
                os.close(fd)
            self.out.write(OpenFailed(channel, f"fork: {exc.strerror or exc}"))
            return
        stdin_read, stdin_write, stdout_read, stdout_write, stderr_read, stderr_write = pipes
        if pid == 0:
            spawn = Spawn(channel, dict(os.environ), os.getcwd())
            become_child(spawn, [stdin_read, stdout_write, stderr_write])  # never returns
        for fd in (stdin_read, stdout_write, stderr_write):
            os.close(fd)
        child = _Child(channel, pid, stdin_write)
        self.children[channel] = child
        self.by_pid[pid] = child
        for fd, stream in ((stdout_read, STDOUT), (stderr_read, STDERR)):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, (child, stream))
        os.set_blocking(stdin_write, False)
        self.out.write(Opened(channel, pid))

    def _output(self, fd: int, child: _Child, stream: int) -> None:
        data = _read(fd)
        if data is None:
            return
        self.out.write(Data(child.channel, stream, data))  # type: ignore[arg-type]
        if not data:
            self.selector.unregister(fd)
            os.close(fd)
            if stream == STDOUT:
                child.stdout_open = False
                self._maybe_closed(child)

    def _flush(self, child: _Child) -> None:
        if child.stdin < 0:
            return
        try:
            while child.pending:
                del child.pending[: os.write(child.stdin, child.pending)]
        except BlockingIOError:
            self._watch_stdin(child, True)
            return
        except OSError:  # it closed its stdin, or ended
            child.pending.clear()
            child.stdin_closing = True
        self._watch_stdin(child, False)
        if child.stdin_closing:
            os.close(child.stdin)
            child.stdin = -1

    def _watch_stdin(self, child: _Child, on: bool) -> None:
        registered = child.stdin in self.selector.get_map()
        if on and not registered:
            self.selector.register(child.stdin, selectors.EVENT_WRITE, child)
        elif not on and registered:
            self.selector.unregister(child.stdin)

    def _reap(self, wake_read: int) -> None:
        for pid, returncode in reaped(wake_read):
            child = self.by_pid.pop(pid, None)
            if child is not None:
                child.returncode = returncode
                self._maybe_closed(child)

    def _maybe_closed(self, child: _Child) -> None:
        """Say the child has ended once it has and its stdout has (all it said is sent);
        its stderr may be held open by what it left running, and need not be waited for."""
        if child.returncode is None or child.stdout_open:
            return
        if self.children.pop(child.channel, None) is None:
            return
        if child.stdin >= 0:
            self._watch_stdin(child, False)
            os.close(child.stdin)
            child.stdin = -1
        self.out.write(Closed(child.channel, child.returncode))


def _read(fd: int) -> bytes | None:
    """What ``fd`` has; b"" at its end (or when it fails), None when it has nothing yet."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def main() -> None:
    sandbox.make_undumpable()  # every child's pipes on this host: not for their commands
    out = FrameWriter(take_protocol_fd())
    server = HostServer(out, float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
    try:
        server.serve()
    except (BrokenPipeError, ConnectionResetError, FrameError) as exc:
        print(f"isoagent host server: {exc}", file=sys.stderr)
    # its children see their stdin end as it exits, and end themselves


if __name__ == "__main__":
    main()
