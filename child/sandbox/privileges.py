"""What a child gives up before it runs a tool: being inspectable, capabilities, gaining
privileges; and what it takes on: adopting every orphan among its descendants.

A process that is not dumpable has its ``/proc/PID/{fd,mem,environ}`` closed to every
process without ``CAP_SYS_PTRACE``; a process with no capabilities has no such
capability, and cannot inspect a process that holds capabilities it lacks. Together: a
command a child runs cannot open its agent's protocol pipe or read any ancestor's
environment or memory. ``no_new_privs`` and an empty bounding set keep an ``execve``
(set-uid, file capabilities, root's own) from giving any of it back.
"""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path

from isoagent.child.sandbox.syscalls import (
    SandboxError,
    fail,
    libc,
    prctl,
    require_single_thread,
)

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE and their locks:
# root's execve grants no capability, and nothing can undo that
_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAP_LAST_CAP = Path("/proc/sys/kernel/cap_last_cap")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def make_undumpable() -> None:
    """Close this process's /proc/PID/{fd,mem,environ} to every process lacking
    ``CAP_SYS_PTRACE``; inherited over fork, reset by execve."""
    prctl("PR_SET_DUMPABLE", _PR_SET_DUMPABLE, 0)


def become_subreaper() -> None:
    """Orphans among this process's descendants (``setsid -f``, double forks) become its
    children instead of init's, so it can still find and end them."""
    prctl("PR_SET_CHILD_SUBREAPER", _PR_SET_CHILD_SUBREAPER, 1)


def no_new_privileges() -> None:
    prctl("PR_SET_NO_NEW_PRIVS", _PR_SET_NO_NEW_PRIVS, 1)


# lock_privileges ran in this process, or in the process it was forked from
_locked = False


def lock_privileges() -> None:
    """Lock the securebits and empty the bounding and ambient sets, so that no ``execve``
    can grant a capability; the process keeps those it has. Without ``CAP_SETPCAP`` (not
    root) the bounding set cannot be emptied, and need not be: ``no_new_privs`` keeps an
    ``execve`` from using it.

    All of it is inherited over fork, and it is the same for every child: a fork server
    does it once, before its first fork (its children still need their capabilities to
    set up their namespaces), and its children skip it."""
    global _locked
    if _locked:
        return
    require_single_thread("locking privileges")
    try:
        last = int(_CAP_LAST_CAP.read_text())
    except (OSError, ValueError):
        last = 63
    can_setpcap = True
    try:
        prctl("PR_SET_SECUREBITS", _PR_SET_SECUREBITS, _SECUREBITS)
    except SandboxError:
        can_setpcap = False  # not root: nothing to lock
    if can_setpcap:
        for cap in range(last + 1):
            if libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
                err = ctypes.get_errno()
                if err != errno.EINVAL:  # EINVAL: a capability this kernel does not know
                    raise fail("prctl(PR_CAPBSET_DROP)", err)
    prctl("PR_CAP_AMBIENT", _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    _locked = True


def drop_capabilities() -> None:
    """``lock_privileges``; then empty the effective, permitted and inheritable sets, and
    set ``no_new_privs``. Capability sets are per thread: call this before any other
    thread starts."""
    require_single_thread("dropping capabilities")
    lock_privileges()
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise fail("capset", ctypes.get_errno())
    no_new_privileges()
