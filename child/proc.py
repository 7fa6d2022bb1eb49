"""Finding processes through Linux /proc (an empty answer elsewhere)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable

TAG_VARIABLE = "ISOAGENT_CHILD_TAG"


def find_processes(*, session: int = 0, tag: str = "") -> list[int]:
    """Pids in session ``session``, or whose environment holds ``ISOAGENT_CHILD_TAG=tag``.

    The tag finds what a child started even after it left the session with setsid.
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
            if session:
                with open(f"/proc/{name}/stat", "rb") as stat_file:
                    stat = stat_file.read()
                # the fields after the command name, which is in parentheses and may hold spaces
                if int(stat[stat.rfind(b")") + 2 :].split()[3]) == session:
                    pids.append(int(name))
                    continue
            if tag:
                with open(f"/proc/{name}/environ", "rb") as environ_file:
                    if tag_entry in environ_file.read().split(b"\0"):
                        pids.append(int(name))
        except (OSError, IndexError, ValueError):  # gone, another user's, or a kernel thread
            continue
    return pids


def signal_processes(
    sig: signal.Signals, *, groups: Iterable[int] = (), session: int = 0, tag: str = ""
) -> None:
    """Send ``sig`` to process groups, to every process of ``session`` and to every process
    tagged ``tag`` (one that left its group and session with setsid); never to this one."""
    for pgid in [*groups, session] if session else groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    if session or tag:
        for pid in find_processes(session=session, tag=tag):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
