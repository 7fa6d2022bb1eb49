"""Namespaces a child enters: a network namespace holding only a loopback interface (no
network), a mount namespace of its own (a private ``/dev/shm``, read-only protected
folders: ``mounts``) and a pid namespace of its own (``pids``)."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
from pathlib import Path

from isoagent.child.sandbox.syscalls import (
    SandboxError,
    fail,
    libc,
    prctl,
    require_single_thread,
    unshare,
)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_NAMES = {
    CLONE_NEWNS: "CLONE_NEWNS",
    CLONE_NEWNET: "CLONE_NEWNET",
    CLONE_NEWPID: "CLONE_NEWPID",
    CLONE_NEWUSER: "CLONE_NEWUSER",
}
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: ifr_name[16], ifr_flags, rest of the 24-byte union


def _call(flags: int) -> str:
    return "unshare(" + "|".join(name for bit, name in _NAMES.items() if flags & bit) + ")"


def enter_namespaces(flags: int) -> None:
    """Move this process into new namespaces (``CLONE_NEWNET``, ``CLONE_NEWNS``; with
    ``CLONE_NEWPID``, its next child: ``pids.become_init``).

    Unprivileged callers get a user namespace too, mapping their own uid and gid.
    Processes inside a new network namespace can still talk to each other over
    127.0.0.1, never to the host.
    """
    if not flags:
        return
    require_single_thread("entering namespaces")
    err = unshare(flags)
    if err == errno.EPERM:
        uid, gid = os.getuid(), os.getgid()
        flags |= CLONE_NEWUSER
        err = unshare(flags)
        if err == 0:
            map_ids(uid, gid)
    if err:
        raise fail(_call(flags), err)
    if flags & CLONE_NEWNET:
        _loopback_up()


def map_ids(uid: int, gid: int) -> None:
    """Map this user's ids (``uid``, ``gid`` outside) in its new user namespace. A process
    that is not dumpable (a fork server's child) has a root-owned /proc/self: dumpable only
    while it writes them."""
    dumpable = int(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))
    prctl("PR_SET_DUMPABLE", _PR_SET_DUMPABLE, 1)
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as exc:
        raise SandboxError(f"cannot map ids in the new user namespace: {exc}") from exc
    finally:
        prctl("PR_SET_DUMPABLE", _PR_SET_DUMPABLE, dumpable)


def disable_network() -> None:
    """A new network namespace holding only a loopback interface."""
    enter_namespaces(CLONE_NEWNET)


def _loopback_up() -> None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack(_IFREQ, b"lo", 0)
            _, flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    except OSError as exc:
        raise SandboxError(f"cannot bring up loopback in the new network namespace: {exc}") from exc
