"""Finding processes through Linux /proc (an empty answer elsewhere)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection, Iterable

TAG_VARIABLE = "ISOAGENT_CHILD_TAG"
# processes end_descendants leaves alone in this one: the remote child's clean-up janitor
SPARED: set[int] = set()
# threads of this process that never start a process (the child's frame reader, its
# heartbeats): ``children`` does not read their ``children`` file. Reading a live thread's
# makes this process's end cost its parent's wait4 1-4 ms of CPU in the kernel (seen on
# Linux 6.18: it waits in /proc's dentry clean-up) against 0.05 ms
QUIET_THREADS: set[int] = set()
# indexes into stat_fields: the /proc/PID/stat fields that follow the command name
STATE = 0
PPID = 1
SESSION = 3
UTIME = 11
STIME = 12
STARTTIME = 19
DEAD = (b"Z", b"X")  # states of a process that has ended (a zombie: not yet reaped)


def find_processes(*, session: int = 0, tag: str = "", born_after: int = 0) -> list[int]:
    """Pids in session ``session``, or whose environment holds ``ISOAGENT_CHILD_TAG=tag``.

    The tag finds what a child started even after it left the session with setsid.
    ``born_after`` (a ``start_time``) skips processes started before it: they cannot
    descend from a child that started then, and most of a machine's processes are such.
    """
    tag_entry = f"{TAG_VARIABLE}={tag}".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    pids = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            if session or born_after:
                fields = stat_fields(name)
                if int(fields[STARTTIME]) < born_after:
                    continue
                if session and int(fields[SESSION]) == session:
                    pids.append(int(name))
                    continue
            if tag and tag_entry in _read(f"/proc/{name}/environ").split(b"\0"):
                pids.append(int(name))
        except (OSError, IndexError, ValueError):  # gone, another user's, or a kernel thread
            continue
    return pids


def start_time(pid: int) -> int:
    """When ``pid`` started, in clock ticks after boot; 0 when it cannot be read."""
    try:
        return int(stat_fields(pid)[STARTTIME])
    except (OSError, IndexError, ValueError):
        return 0


def stat_fields(pid: int | str) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (index them with STATE...)."""
    stat = _read(f"/proc/{pid}/stat")
    # the command name is in parentheses and may hold spaces
    return stat[stat.rfind(b")") + 2 :].split()


def _read(path: str) -> bytes:
    """A whole /proc file: os-level reads, which a scan of every process needs to be cheap."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while part := os.read(fd, 1 << 16):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(fd)


def signal_processes(
    sig: signal.Signals,
    *,
    groups: Iterable[int] = (),
    session: int = 0,
    tag: str = "",
    born_after: int = 0,
) -> None:
    """Send ``sig`` to process groups, to every process of ``session`` and to every process
    tagged ``tag`` (one that left its group and session with setsid); never to this one.
    ``born_after``: as in ``find_processes``."""
    for pgid in [*groups, session] if session else groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    if session or tag:
        for pid in find_processes(session=session, tag=tag, born_after=born_after):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)


def children(pid: int | str) -> list[int]:
    """The children of ``pid`` (of each of its threads but ``QUIET_THREADS``): no scan of
    /proc."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    if pid in ("self", os.getpid()):
        threads = [t for t in threads if int(t) not in QUIET_THREADS]
    found: list[int] = []
    for thread in threads:
        with contextlib.suppress(OSError, ValueError):
            found += map(int, _read(f"/proc/{pid}/task/{thread}/children").split())
    return found


def descendants(pid: int | str, spare: Collection[int] = ()) -> list[int]:
    """Every descendant of ``pid``, ended ones (zombies) included; not ``spare`` ones, nor
    theirs."""
    found: list[int] = []
    queue = children(pid)
    while queue:
        child = queue.pop()
        if child not in spare:
            found.append(child)
            queue += children(child)
    return found


def end_descendants(
    pid: int | str = "self", spare: Collection[int] = (), passes: int = 100
) -> None:
    """SIGKILL every descendant of ``pid``, pass after pass until none is left running.

    Found by walking the process tree down from ``pid``: a subreaper (``pid`` is, when it
    is a child agent) keeps every orphan among its descendants in that tree, whatever
    session or environment the orphan gave itself; what a killed process had forked is
    found on the next pass.
    """
    for _ in range(passes):
        running = [p for p in descendants(pid, spare) if _running(p)]
        if not running:
            return
        for child in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)


def reap_orphans(keep: Collection[int]) -> None:
    """Reap this process's ended children but ``keep`` (those someone else waits for): in a
    subreaper, orphans it adopted, whose zombies would otherwise hold their pids (and count
    against a pids cgroup) until it ends."""
    for child in children("self"):
        if child not in keep and not _running(child):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, os.WNOHANG)


def _running(pid: int) -> bool:
    try:
        return stat_fields(pid)[STATE] not in DEAD
    except (OSError, IndexError):
        return False


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
