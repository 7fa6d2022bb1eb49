"""``python -m isoagent.child.forkserver FD``: a preloaded process that forks ready children.

The parent starts it once per session with one end of a ``SOCK_SEQPACKET``
socket pair as FD. It imports everything a child needs, computes the tools'
input schemas (about 4 ms a child otherwise), freezes those objects
out of the garbage collector (so children share their pages), and then, single
threaded, serves ``Spawn`` requests: each carries the child's environment and
working directory, and its stdin, stdout and stderr pipe ends as
``SCM_RIGHTS`` descriptors. The forked child becomes a session leader on those
pipes with exactly the given environment and runs ``child.main.main()``; it is
its own process, as if started with ``python -m isoagent.child``. The server reaps its
children and reports each exit; it ends when the parent's end of the socket
closes, and its children are unaffected by that (they end on stdin EOF).

It is a subreaper: when a child dies without ending what it started (killed by one
of its own commands, say), those orphans become the server's, not init's, and it
kills them at once. Where the run has cgroups they would end with the child's
cgroup anyway; without them (a user whose cgroups are not delegated) this is what
keeps ``setsid -f`` + ``kill -9 $PPID`` from outliving the run.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import msgspec

from isoagent.child import (
    hands,
    sandbox,  # preloaded: what a child imports when it confines itself
)
from isoagent.child import main as child_main
from isoagent.child.agent.process_tree import PPID, stat_fields
from isoagent.child.agent.tools import TOOL_CLASSES
from isoagent.child.agent.tools.base import input_schema
from isoagent.child.sandbox import pids
from isoagent.protocol.forkserver import (
    MAX_MESSAGE,
    Attach,
    Exited,
    Spawn,
    Spawned,
    SpawnFailed,
    decode_request,
    encode,
)

PIPES = 3  # the child's stdin, stdout and stderr


def serve(sock: socket.socket) -> None:
    """Answer requests until the parent's end of ``sock`` closes and so has that of every
    parent it was asked to serve too (``Attach``: a warm daemon's sessions)."""
    wake_read = wake_on_child_exit()
    preload()
    parents = {sock.fileno(): sock}
    spawned: dict[int, socket.socket] = {}  # each child, and the parent that asked for it
    while parents:
        ready, _, _ = select.select([*parents, wake_read], [], [])
        if wake_read in ready:
            for pid, returncode in reaped(wake_read):
                if (parent := spawned.pop(pid, None)) is not None:
                    _send(parents, parent, Exited(pid, returncode))
            end_adopted(set(spawned))
        for fd in ready:
            if (parent := parents.get(fd)) is None:
                continue  # the wake-up pipe, or a parent dropped meanwhile
            data, fds, flags, _ = socket.recv_fds(parent, MAX_MESSAGE, PIPES)
            if not data:  # that parent is gone
                _drop(parents, parent)
            elif pid := _request(parents, parent, parent is sock, data, fds, flags):
                spawned[pid] = parent


def end_adopted(spawned: set[int]) -> None:
    """SIGKILL every child of this process it did not fork: orphans of a child that
    died (their own orphans are adopted in turn, and ended at the next wake-up)."""
    for pid in own_children() - spawned:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def own_children() -> set[int]:
    me = os.getpid()
    try:
        return {int(pid) for pid in Path(f"/proc/{me}/task/{me}/children").read_text().split()}
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: every process's parent
        children = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    if int(stat_fields(entry)[PPID]) == me:
                        children.add(int(entry))
        return children


def preload() -> None:
    """Compute once, here, what every child computes alike (the tools' schemas, the
    privileges no child may regain), and keep the objects out of the garbage collector,
    so that forked children share their pages."""
    for tool in TOOL_CLASSES.values():
        input_schema(tool.Input)
    sandbox.lock_privileges()
    gc.collect()
    gc.freeze()


def _request(
    parents: dict[int, socket.socket],
    parent: socket.socket,
    first: bool,
    data: bytes,
    fds: list[int],
    flags: int,
) -> int:
    """Serve one request of ``parent``: the forked child's pid; 0 if none was forked."""
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            _send(parents, parent, SpawnFailed(0, f"malformed request ({len(data)} bytes)"))
            return 0
        try:
            request = decode_request(data)
        except msgspec.DecodeError as exc:
            _send(parents, parent, SpawnFailed(0, f"malformed request: {exc}"))
            return 0
        if isinstance(request, Attach):  # only the parent that started it attaches others
            if first and len(fds) == 1:
                attached = socket.socket(fileno=os.dup(fds[0]))
                attached.setblocking(True)
                parents[attached.fileno()] = attached
            return 0
        if len(fds) != PIPES:
            _send(parents, parent, SpawnFailed(0, f"malformed request ({len(fds)} fds)"))
            return 0
        sys.stderr.flush()
        try:
            pid = _fork(request)
        except OSError as exc:
            _send(parents, parent, SpawnFailed(request.request, f"fork: {exc.strerror or exc}"))
            return 0
        if pid == 0:
            become_child(request, fds)  # never returns
        _send(parents, parent, Spawned(request.request, pid))
        return pid
    finally:  # the parent must be the only holder of the other pipe ends, or EOF never comes
        for fd in fds:
            os.close(fd)


def _fork(request: Spawn) -> int:
    """Fork the child, pid 1 of a pid namespace of its own if the request says so and the
    machine allows (else its sandbox makes one as it confines itself)."""
    if request.pid_namespace:
        with contextlib.suppress(OSError):
            return pids.fork_as_init()
    return os.fork()


def become_child(request: Spawn, fds: list[int]) -> None:
    """In the forked child: become ``python -m isoagent.child`` (or the parent's hands) on
    the given descriptors, then exit."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(PIPES, os.sysconf("SC_OPEN_MAX"))  # the server's socket above all
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request.env)
        os.chdir(request.cwd)
        if request.program == "hands":
            code = hands.main(["isoagent.child.hands", *request.args])
        else:
            code = child_main.main()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)  # never back into the server's loop, never the server's atexit


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def wake_on_child_exit() -> int:
    """A pipe's read end that becomes readable when a child of this process exits."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is the notice
    return wake_read


def reaped(wake_read: int) -> Iterator[tuple[int, int]]:
    """Empty the wake-up pipe; then each ended child's pid and returncode (as in
    subprocess: negative when a signal killed it)."""
    with contextlib.suppress(BlockingIOError):
        while os.read(wake_read, 512):
            pass
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


def _send(
    parents: dict[int, socket.socket], parent: socket.socket, frame: Spawned | SpawnFailed | Exited
) -> None:
    """Tell ``parent``; one that cannot be told any more is served no more."""
    if parents.get(parent.fileno()) is not parent:
        return
    try:
        parent.send(encode(frame))
    except OSError:
        _drop(parents, parent)


def _drop(parents: dict[int, socket.socket], parent: socket.socket) -> None:
    del parents[parent.fileno()]
    parent.close()


def main() -> None:
    sandbox.make_undumpable()  # its socket and its children's pipes: not for their commands
    sandbox.become_subreaper()  # a dead child's orphans come here, to be ended
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    with contextlib.suppress(ConnectionResetError):
        serve(sock)


if __name__ == "__main__":
    main()
