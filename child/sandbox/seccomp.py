"""A seccomp filter for sandboxed children and those without network: no Unix-domain
socket of their own.

A network namespace already cuts TCP, UDP and abstract Unix sockets off from the
host (and with the network on, Landlock scopes abstract ones), but path-named Unix
sockets live in the filesystem (a Docker daemon, an SSH
agent, D-Bus): connecting to one needs only the path. Landlock (up to ABI 7) does not
cover ``connect``, and seccomp cannot read the path a ``connect`` names, so the filter
refuses to create a Unix-domain socket at all (``socket(AF_UNIX, ...)`` fails with
EPERM; ``socketpair`` still works, it reaches nothing outside). It also refuses
``io_uring_setup``, whose socket and connect operations would not pass the filter.
The 32-bit x86 entry points are filtered alike (``socketcall`` multiplexes ``socket``
there and cannot be inspected, so it is refused whole); x32 calls are refused.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

from isoagent.child.sandbox.privileges import no_new_privileges
from isoagent.child.sandbox.syscalls import SandboxError, require_single_thread, syscall

_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_I386 = 0x40000003
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_X32_SYSCALL_BIT = 0x40000000
# per architecture: its AUDIT_ARCH, socket, io_uring_setup, calls refused outright
_ARCHES = {
    "x86_64": (_AUDIT_ARCH_X86_64, 41, 425, ()),
    "i386": (_AUDIT_ARCH_I386, 359, 425, (102,)),  # socketcall
    "aarch64": (_AUDIT_ARCH_AARCH64, 198, 425, ()),
}
_COMPAT = {"x86_64": ("i386",), "aarch64": ()}
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (low half first on little endian)
_NR, _ARCH, _ARG0 = 0, 4, 16
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_ALLOW = 0x7FFF0000
_REFUSE = 0x00050000 | errno.EPERM


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _rules(arch: str) -> list[bytes]:
    """Instructions for one architecture, entered with its syscall number loaded;
    what they do not refuse they allow."""
    _, sock, io_uring, refused = _ARCHES[arch]
    ops: list[bytes] = []
    if arch == "x86_64":
        ops += [_op(_JSET_K, _X32_SYSCALL_BIT, 0, 1), _op(_RET_K, _REFUSE)]
    for number in (io_uring, *refused):
        ops += [_op(_JEQ_K, number, 0, 1), _op(_RET_K, _REFUSE)]
    ops += [
        _op(_JEQ_K, sock, 0, 3),
        _op(_LD_W_ABS, _ARG0),
        _op(_JEQ_K, socket.AF_UNIX, 0, 1),
        _op(_RET_K, _REFUSE),
        _op(_RET_K, _ALLOW),
    ]
    return ops


def _program(machine: str) -> list[bytes]:
    """arch dispatch: each known arch's rules; any other arch is refused whole."""
    ops: list[bytes] = []
    for arch in (machine, *_COMPAT[machine]):
        rules = [_op(_LD_W_ABS, _NR), *_rules(arch)]
        ops += [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, _ARCHES[arch][0], 0, len(rules)), *rules]
    return [*ops, _op(_RET_K, _REFUSE)]


def available() -> bool:
    return platform.machine() in _SYS_SECCOMP


def forbid_unix_sockets() -> None:
    """Refuse ``socket(AF_UNIX, ...)`` and io_uring to this process and all it starts."""
    machine = platform.machine()
    if machine not in _SYS_SECCOMP:
        raise SandboxError(f"no seccomp filter for {machine}")
    require_single_thread("the seccomp filter")
    code = b"".join(_program(machine))
    buffer = ctypes.create_string_buffer(code, len(code))
    program = _Program(len(code) // 8, ctypes.addressof(buffer))
    no_new_privileges()
    syscall(
        "seccomp(SECCOMP_SET_MODE_FILTER)",
        _SYS_SECCOMP[machine],
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(0),
        ctypes.byref(program),
    )
