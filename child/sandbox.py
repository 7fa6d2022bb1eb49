"""OS-enforced restrictions the child applies to itself before it runs any tool.

Three independent pieces, all inherited by everything the child later forks or
execs (the ``bash`` tool included):

- ``apply_sandbox``: Landlock filesystem rules (read everywhere, write only under
  the task's tmpdir, plus the workspace in ``"workspace"`` mode);
- ``apply_limits``: rlimits on CPU time, address space, processes, file size;
- ``disable_network``: a fresh, empty network namespace.

Landlock rules and the network namespace bind the calling thread and its future
children only, so call these from the main thread before any other thread
starts. Call ``disable_network`` first: its user-namespace fallback writes
``/proc/self/uid_map``, which the Landlock sandbox forbids.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import signal
import socket
import struct
import threading
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

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
# POSIX shared memory and semaphores (multiprocessing) live here; scratch space, like tmpdir.
_SHM = "/dev/shm"

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: ifr_name[16], ifr_flags, rest of the 24-byte union


class SandboxError(Exception):
    """A restriction could not be applied."""


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


def _fail(call: str, err: int) -> SandboxError:
    return SandboxError(f"{call} failed: {errno.errorcode.get(err, err)} ({os.strerror(err)})")


def _syscall(name: str, number: int, *args: object) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        raise _fail(name, ctypes.get_errno())
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    version = _libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(version), 0)


def _require_single_thread(what: str) -> None:
    """Landlock domains and namespaces bind the calling thread only; others would escape."""
    if threading.active_count() > 1:
        raise SandboxError(f"{what} must run before any thread starts")


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
        _syscall(
            "landlock_add_rule",
            _SYS_LANDLOCK_ADD_RULE,
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)


def apply_sandbox(mode: str, workspace: Path, tmpdir: Path) -> None:
    """Confine this process and its future children with Landlock.

    ``"off"`` does nothing. ``"read-only"`` allows reading and executing
    everywhere and writing only under ``tmpdir`` (plus ``/dev/shm`` and a few
    character devices such as ``/dev/null``). ``"workspace"`` also allows writing
    under ``workspace``. On ABI 6+ the process can no longer signal, or connect
    to abstract unix sockets of, processes outside its sandbox.
    """
    if mode == "off":
        return
    if mode not in ("read-only", "workspace"):
        raise SandboxError(f"unknown sandbox mode {mode!r}")
    _require_single_thread("apply_sandbox")
    abi = landlock_abi()
    if abi == 0:
        raise SandboxError("Landlock is unavailable in this kernel; cannot apply the sandbox")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled, scoped=_SCOPES if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else _RulesetAttr.handled_access_net.offset
    ruleset_fd = _syscall(
        "landlock_create_ruleset",
        _SYS_LANDLOCK_CREATE_RULESET,
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    try:
        rules = [("/", _READ), (str(tmpdir), _WRITE_TREE)]
        if mode == "workspace":
            rules.append((str(workspace), _WRITE_TREE))
        if os.path.isdir(_SHM):
            rules.append((_SHM, _WRITE_TREE))
        rules += [(device, _DEVICE) for device in _WRITABLE_DEVICES if os.path.exists(device)]
        for path, access in rules:
            _add_rule(ruleset_fd, path, access & handled)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, *map(ctypes.c_ulong, (1, 0, 0, 0))) != 0:
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS)", ctypes.get_errno())
        _syscall(
            "landlock_restrict_self",
            _SYS_LANDLOCK_RESTRICT_SELF,
            ctypes.c_int(ruleset_fd),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(ruleset_fd)


def _lower(name: str, which: int, soft: int, hard: int | None = None) -> None:
    """Lower ``which`` to (soft, hard), keeping any current limit that is already tighter."""

    def cap(value: int, current: int) -> int:
        return value if current == resource.RLIM_INFINITY else min(value, current)

    current_soft, current_hard = resource.getrlimit(which)
    limits = (cap(soft, current_soft), cap(soft if hard is None else hard, current_hard))
    try:
        resource.setrlimit(which, limits)
    except (OSError, ValueError) as exc:
        raise SandboxError(f"setrlimit({name}, {soft}) failed: {exc}") from exc


def apply_limits(
    cpu_seconds: int, address_space_mb: int, max_processes: int, file_size_mb: int
) -> None:
    """Set rlimits (soft and hard) for each limit > 0; never raises an existing hard limit.

    ``cpu_seconds``: SIGXCPU at the limit, SIGKILL one second later (per process).
    ``address_space_mb``: virtual memory, so threaded runtimes (JVM, Go, glibc
    per-thread malloc arenas) hit it long before their resident size does.
    ``max_processes``: RLIMIT_NPROC counts every process of the real uid, and the
    kernel ignores it for root. ``file_size_mb``: SIGXFSZ is ignored here, so an
    oversized write fails with EFBIG instead of killing the child; the ignore is
    inherited across exec, but ``subprocess`` resets it unless ``restore_signals=False``.
    """
    if cpu_seconds > 0:
        _lower("RLIMIT_CPU", resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)
    if address_space_mb > 0:
        _lower("RLIMIT_AS", resource.RLIMIT_AS, address_space_mb * 1024 * 1024)
    if max_processes > 0:
        _lower("RLIMIT_NPROC", resource.RLIMIT_NPROC, max_processes)
    if file_size_mb > 0:
        _lower("RLIMIT_FSIZE", resource.RLIMIT_FSIZE, file_size_mb * 1024 * 1024)
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        except ValueError as exc:
            raise SandboxError(f"cannot ignore SIGXFSZ: {exc}") from exc


def _unshare(flags: int) -> int:
    """0 on success, else the errno."""
    return 0 if _libc.unshare(ctypes.c_int(flags)) == 0 else ctypes.get_errno()


def disable_network() -> None:
    """Move this process into a new network namespace holding only a loopback interface.

    Unprivileged callers get a user namespace too, mapping their own uid and gid.
    Processes inside can still talk to each other over 127.0.0.1, never to the host.
    """
    _require_single_thread("disable_network")
    call, err = "unshare(CLONE_NEWNET)", _unshare(_CLONE_NEWNET)
    if err == errno.EPERM:
        uid, gid = os.getuid(), os.getgid()
        call, err = "unshare(CLONE_NEWUSER|CLONE_NEWNET)", _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
        if err == 0:
            try:
                Path("/proc/self/setgroups").write_text("deny")
                Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
                Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
            except OSError as exc:
                raise SandboxError(f"cannot map ids in the new user namespace: {exc}") from exc
    if err:
        raise _fail(call, err)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack(_IFREQ, b"lo", 0)
            _, flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    except OSError as exc:
        raise SandboxError(f"cannot bring up loopback in the new network namespace: {exc}") from exc
