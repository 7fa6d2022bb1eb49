"""rlimits a child sets on itself: CPU time, address space, processes, file size, open files."""

from __future__ import annotations

import resource
import signal

from isoagent.child.sandbox.syscalls import SandboxError

CHILD_OPEN_FILES = 4096  # open files per process of a child, soft and hard


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
    Open files are always held to ``CHILD_OPEN_FILES``: the parent raises its own soft
    limit to its hard one, which its children would otherwise inherit.
    """
    _lower("RLIMIT_NOFILE", resource.RLIMIT_NOFILE, CHILD_OPEN_FILES)
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
