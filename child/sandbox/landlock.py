"""Landlock: the filesystem rules a child applies to itself before it runs any tool.

Read and execute everywhere; write only under the task's tmpdir (plus the
workspace and the added folders in ``"workspace"`` mode, and a private ``/dev/shm`` when the mount
namespace made one). Inherited by everything the child later forks or execs.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path

from isoagent.child.sandbox.mounts import SHM
from isoagent.child.sandbox.privileges import no_new_privileges
from isoagent.child.sandbox.syscalls import SandboxError, libc, require_single_thread, syscall

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_LANDLOCK_RULE_PATH_BENEATH = 1

# Filesystem access rights (include/uapi/linux/landlock.h).
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_BLOCK = 1 << 11
_FS_V1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
# Scopes (ABI 6): no signals to, no abstract unix sockets of, processes outside the sandbox.
_SCOPES = (1 << 0) | (1 << 1)

_READ = _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE
# Writable trees get every right except creating device nodes (root could mknod a disk).
_WRITE_TREE = ~(_FS_MAKE_CHAR | _FS_MAKE_BLOCK)
_DEVICE = _FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
# Character devices shells and terminal tools open for writing.
_WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    )


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    version = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(version), 0)


def _handled_fs(abi: int) -> int:
    handled = _FS_V1
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    return handled


def _add_rule(ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"cannot open {path} for a Landlock rule: {exc.strerror}") from exc
    try:
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        syscall(
            "landlock_add_rule",
            _SYS_LANDLOCK_ADD_RULE,
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)


def apply_sandbox(
    mode: str,
    workspace: Path,
    tmpdir: Path,
    *,
    shm: bool = False,
    add_dirs: Sequence[Path] = (),
) -> None:
    """Confine this process and its future children with Landlock.

    ``"off"`` does nothing. ``"read-only"`` allows reading and executing
    everywhere and writing only under ``tmpdir`` (plus a few character devices
    such as ``/dev/null``, and ``/dev/shm`` when ``shm``: only once a mount namespace
    has made it private). ``"workspace"`` also allows writing under ``workspace`` and
    each of ``add_dirs``.
    On ABI 6+ the process can no longer signal, or connect to abstract unix sockets
    of, processes outside its sandbox.
    """
    if mode == "off":
        return
    if mode not in ("read-only", "workspace"):
        raise SandboxError(f"unknown sandbox mode {mode!r}")
    require_single_thread("apply_sandbox")
    abi = landlock_abi()
    if abi == 0:
        raise SandboxError("Landlock is unavailable in this kernel; cannot apply the sandbox")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled, scoped=_SCOPES if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else _RulesetAttr.handled_access_net.offset
    ruleset_fd = syscall(
        "landlock_create_ruleset",
        _SYS_LANDLOCK_CREATE_RULESET,
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    try:
        rules = [("/", _READ), (str(tmpdir), _WRITE_TREE)]
        if mode == "workspace":
            rules += [(str(path), _WRITE_TREE) for path in (workspace, *add_dirs)]
        if shm:  # POSIX shared memory and semaphores (multiprocessing): made private
            rules.append((SHM, _WRITE_TREE))
        rules += [(device, _DEVICE) for device in _WRITABLE_DEVICES if os.path.exists(device)]
        for path, access in rules:
            _add_rule(ruleset_fd, path, access & handled)
        no_new_privileges()
        syscall(
            "landlock_restrict_self",
            _SYS_LANDLOCK_RESTRICT_SELF,
            ctypes.c_int(ruleset_fd),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(ruleset_fd)
