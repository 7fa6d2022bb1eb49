"""A pid namespace of its own: a sandboxed child and its commands see no other process.

Any process can read every other's ``/proc/PID/cmdline`` (another user's secret passed as
an argument, the CLI's own, which holds the user's prompt). A sandboxed child is pid 1 of a
pid namespace of its own with a fresh ``/proc`` that shows only it (``mounts.fresh_proc``),
as bubblewrap's ``--unshare-pid --proc`` gives. When pid 1 ends, the kernel ends every
process of its namespace: nothing a child started outlives it. As pid 1 it gets only the
signals it handles (and SIGKILL from outside): the child agent handles SIGTERM; its
commands cannot kill it.

``unshare(CLONE_NEWPID)`` moves only the caller's future children, so there are two ways
in. The fork server makes the child pid 1 as it forks it (``fork_as_init``: a ``clone``
with ``CLONE_NEWPID``, 0.6 ms of a child's CPU). A child started otherwise (exec'd, a host
server's, the parent's confined commands) forks once as it confines itself
(``become_init``): the fork is pid 1, and the process its parent started stays outside, a
waiter that passes on the signals it is sent and ends as the fork ends. That costs about
3 ms more (the copy of a second Python process), on paths that cost an interpreter's start.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import signal
import sys

from isoagent.child.sandbox.namespaces import CLONE_NEWPID, CLONE_NEWUSER, map_ids
from isoagent.child.sandbox.syscalls import SandboxError, prctl

_PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what stops a child, passed on
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
# the GIL held across the call, as os.fork holds it
_python = ctypes.PyDLL(None, use_errno=True)
_python.syscall.restype = ctypes.c_long


def fork_as_init() -> int:
    """``os.fork``, the child made pid 1 of a new pid namespace (in a new user namespace
    too, mapping this user's ids, where only that allows it): 0 in the child, its pid
    here. ``OSError`` when it cannot be (fork as usual: the child's ``confine`` will make
    one itself)."""
    if _SYS_CLONE is None:
        raise OSError(errno.ENOSYS, f"no clone number for {platform.machine()}")
    uid, gid = os.getuid(), os.getgid()
    err = errno.EPERM
    for flags in (CLONE_NEWPID, CLONE_NEWPID | CLONE_NEWUSER):
        pid = _clone(_SYS_CLONE, flags)
        if pid == 0:
            if flags & CLONE_NEWUSER:
                _mapped(uid, gid)
            return 0
        if pid > 0:
            return pid
        err = -pid
        if err != errno.EPERM:
            break
    raise OSError(err, os.strerror(err))


def _mapped(uid: int, gid: int) -> None:
    """In the fork: map the user's ids in its new user namespace, or end it (it must never
    go on as its parent, nor unmapped)."""
    try:
        map_ids(uid, gid)
    except BaseException as exc:
        print(f"isoagent child: {exc}", file=sys.stderr, flush=True)
        os._exit(1)


def _clone(number: int, flags: int) -> int:
    """A raw ``clone`` (syscall ``number``) with the bookkeeping ``os.fork`` does around its
    ``fork`` (the interpreter's locks, ``os.register_at_fork``'s handlers): the pid, 0 in
    the child, -errno."""
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _python.syscall(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), 0, 0, 0, 0)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    return int(pid) if pid > 0 else -err


def become_init() -> None:
    """Fork after ``unshare(CLONE_NEWPID)``: return in the fork, pid 1 of the new
    namespace, which dies with this process; this process never returns (``_wait_for``)."""
    alive, held = os.pipe()  # held by the waiter alone: its end is the read end's EOF
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(alive)
        os.close(held)
        raise SandboxError(f"cannot start a pid namespace: fork: {exc.strerror}") from exc
    if pid:
        _wait_for(pid, held)
    os.close(held)
    prctl("PR_SET_PDEATHSIG", _PR_SET_PDEATHSIG, signal.SIGKILL)
    os.set_blocking(alive, False)
    try:
        gone = os.read(alive, 1) == b""  # EOF: the waiter died before the line above
    except BlockingIOError:
        gone = False
    os.close(alive)
    if gone:
        os._exit(1)


def _wait_for(pid: int, held: int) -> None:
    """Hold nothing of the child's but ``held`` (its pipes, its proxy link: their ends must
    come with its end), pass on what stops it, and end as it ends."""
    try:
        os.closerange(0, held)
        os.closerange(held + 1, os.sysconf("SC_OPEN_MAX"))
        for sig in FORWARDED:
            signal.signal(sig, lambda number, _: _forward(pid, number))
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:  # killed: so is its waiter, by the same signal (as a shell says it)
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
            code = 128 - code
    except BaseException:  # whatever happens, never back into the caller
        code = 1
    os._exit(code & 0xFF)


def _forward(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)
