"""Inside the child's own mount namespace: a private ``/dev/shm``, no device in ``/dev`` but
the usual harmless ones, and folders of the workspace that stay read-only though the
workspace is writable (``.git``, ``.claude``, ``.isoagent``). Nothing mounted here is seen
outside: the namespace's mounts are made private first. The child later loses the capability
(and, under Landlock, the right) to unmount any of it."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

from isoagent.child.sandbox.syscalls import fail, libc

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_RELATIME = 1 << 21
# flags of the mount a bind inherits, which a remount must repeat (in a user namespace,
# dropping one is refused): statvfs's ST_* bit -> MS_* bit
_KEPT_FLAGS = {1: 1, 8: 8, 1024: 1024, 2048: 2048, 4096: _MS_RELATIME}  # ro, noexec, noatime...
SHM = "/dev/shm"
SHM_SIZE = "64m"
# the device nodes a child opens; as root it could otherwise read every disk (root:disk
# 0660), the consoles' screens and keyboards (/dev/vcs*, /dev/tty1, root 0600)... Not
# /dev/tty (a child has no controlling terminal) nor /dev/ptmx (with /dev/pts hidden, it
# opens no terminal): each bind is 10-20 us of a child's CPU
USUAL_DEVICES = ("null", "zero", "full", "random", "urandom")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    encode = os.fsencode
    if (
        libc.mount(
            None if source is None else encode(source),
            encode(target),
            None if fstype is None else encode(fstype),
            ctypes.c_ulong(flags),
            encode(data) if data else None,
        )
        != 0
    ):
        raise fail(f"mount {target}", ctypes.get_errno())


def make_private() -> None:
    """Nothing mounted in this namespace from now on propagates to the host's."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def fresh_proc() -> None:
    """A ``/proc`` of this process's pid namespace over the host's: only its processes
    (``pids``). Mounted by pid 1 of that namespace (a procfs shows the mounter's)."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def private_shm(keep: Sequence[str] = ()) -> bool:
    """A fresh, small tmpfs on ``/dev/shm``; False when there is no ``/dev/shm``. ``keep``:
    folders under the host's ``/dev/shm`` the child works in (a ``TMPDIR`` there), bound
    back at their paths."""
    if not os.path.isdir(SHM):
        return False
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    try:
        _mount("tmpfs", SHM, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={SHM_SIZE},mode=1777")
        for path, fd in kept:
            os.makedirs(path, mode=0o700, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND)
    finally:
        for _, fd in kept:
            os.close(fd)
    return True


def usual_devices_only() -> None:
    """Every device node on ``/dev``'s own mount stops opening (``nodev``), but for
    ``USUAL_DEVICES``, each bound onto itself first: a mount of its own, which keeps them.
    The mounts below ``/dev`` (``/dev/shm``, ``/dev/pts``) are left as they are."""
    if not os.path.ismount("/dev"):  # /dev a folder of /: its own mount, to change alone
        _mount("/dev", "/dev", None, _MS_BIND | _MS_REC)
    for name in USUAL_DEVICES:
        path = f"/dev/{name}"
        if os.path.exists(path) and not os.path.islink(path):
            _mount(path, path, None, _MS_BIND)
    _remount("/dev", _MS_NOSUID | _MS_NODEV)


def hide(path: str) -> None:
    """Cover ``path`` with nothing: an empty read-only tmpfs over a folder, ``/dev/null``
    bound read-only over a file."""
    if os.path.isdir(path):
        flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _mount("tmpfs", path, "tmpfs", flags, "size=4k,mode=000")
    else:
        _mount("/dev/null", path, None, _MS_BIND)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)


def read_only(path: str) -> None:
    """Bind ``path`` onto itself, read-only (an existing folder or file)."""
    _mount(path, path, None, _MS_BIND | _MS_REC)
    _remount(path, _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _remount(path: str, flags: int) -> None:
    """Remount the bind mount at ``path`` with ``flags``, and those of ``_KEPT_FLAGS`` it has."""
    kept = os.statvfs(path).f_flag
    flags |= sum(ms for st, ms in _KEPT_FLAGS.items() if kept & st)
    _mount(None, path, None, _MS_REMOUNT | _MS_BIND | flags)
