"""A pid namespace of its own: a sandboxed child and its commands see no other process.

Any process can read every other's ``/proc/PID/cmdline`` (another user's secret passed as
an argument, the CLI's own, which holds the user's prompt). A sandboxed child gets a pid
namespace of its own and a fresh ``/proc`` that shows only it (``mounts.fresh_proc``), as
bubblewrap's ``--unshare-pid --proc`` does.

``unshare(CLONE_NEWPID)`` moves only the caller's future children, so the confining
process forks once (``become_init``): the fork, pid 1 of the new namespace, confines itself
and runs; the process its parent started stays outside, a waiter that passes on the
signals it is sent and ends as the fork ends (its exit status, or the signal that killed
it). When pid 1 ends, the kernel ends every process of its namespace: nothing a child
started outlives it. As pid 1 it gets only the signals it handles (and SIGKILL from
outside): the child agent handles SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal

from isoagent.child.sandbox.syscalls import SandboxError, prctl

CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what stops a child, passed on


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
