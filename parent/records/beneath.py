"""Opening a path beneath a folder the parent holds, following no link on the way or at
its end: what the parent opens in a folder a child could have written (the workspace, for
the planted-names mover; the run folders' parents).

``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` (Linux 5.6) in one call; Python
has no wrapper, so through ``syscall``. Where the kernel lacks it, one ``openat`` with
``O_NOFOLLOW`` a component at a time does the same (said once, on stderr).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

_SYS_OPENAT2 = 437  # the same on every architecture (the unified table)
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_openat2 = True  # until the kernel says it has none


def open_beneath(folder: int, path: str, flags: int = FOLDER, mode: int = 0o600) -> int:
    """``path`` (relative; no ``..``) opened beneath the folder fd ``folder`` with ``flags``;
    a link anywhere on it fails with ``ELOOP`` (or ``ENOTDIR``), as a ``..`` does with
    ``EXDEV``."""
    global _openat2
    flags |= os.O_CLOEXEC
    if _openat2:
        how = _OpenHow(
            flags, mode if flags & os.O_CREAT else 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS
        )
        fd = _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(folder),
            os.fsencode(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.ENOSYS:
            raise OSError(err, os.strerror(err), path)
        _openat2 = False
        print(
            "isoagent: warning: this kernel has no openat2: paths in the workspace are opened "
            "a folder at a time, each without following a link",
            file=sys.stderr,
        )
    return _open_stepwise(folder, path, flags, mode)


def _open_stepwise(folder: int, path: str, flags: int, mode: int) -> int:
    """``open_beneath`` without ``openat2``: ``O_NOFOLLOW`` at each component."""
    *folders, last = path.split("/")
    if ".." in folders or last == "..":
        raise OSError(errno.EXDEV, "a path beneath a folder has no '..'", path)
    fd = folder
    try:
        for name in folders:
            if name in ("", "."):
                continue
            inner = os.open(name, FOLDER, dir_fd=fd)
            if fd != folder:
                os.close(fd)
            fd = inner
        return os.open(last or ".", flags | os.O_NOFOLLOW, mode, dir_fd=fd)
    finally:
        if fd != folder:
            os.close(fd)
