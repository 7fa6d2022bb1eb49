"""The few libc calls the sandbox makes through ctypes, and the error they raise."""

from __future__ import annotations

import ctypes
import errno
import os
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class SandboxError(Exception):
    """A restriction could not be applied."""


def fail(call: str, err: int) -> SandboxError:
    return SandboxError(f"{call} failed: {errno.errorcode.get(err, err)} ({os.strerror(err)})")


def syscall(name: str, number: int, *args: object) -> int:
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        raise fail(name, ctypes.get_errno())
    return int(result)


def prctl(name: str, option: int, *args: int) -> None:
    values = [*args, 0, 0, 0, 0][:4]
    if libc.prctl(ctypes.c_int(option), *map(ctypes.c_ulong, values)) != 0:
        raise fail(f"prctl({name})", ctypes.get_errno())


def unshare(flags: int) -> int:
    """0 on success, else the errno."""
    return 0 if libc.unshare(ctypes.c_int(flags)) == 0 else ctypes.get_errno()


def require_single_thread(what: str) -> None:
    """Landlock domains, seccomp filters and namespaces bind the calling thread only;
    other threads would escape them. Every thread of the process counts, ``threading``'s
    or not (``_thread``'s, a C library's): ``/proc/self/task`` has a link for each."""
    try:
        threads = os.stat("/proc/self/task").st_nlink - 2
    except OSError:  # no /proc: the threads threading knows of
        threads = threading.active_count()
    if threads > 1:
        raise SandboxError(f"{what} must run before any thread starts")
