"""Watching processes from a test: is it alive, wait until something holds."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from isoagent.child.agent.process_tree import DEAD, STATE, stat_fields


def alive(pid: int) -> bool:
    """Running, and not a zombie (a zombie is dead for our purpose)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return stat_fields(pid)[STATE] not in DEAD
    except (OSError, IndexError):
        return False


def running(*argv: str) -> list[int]:
    """The live processes whose command line is exactly ``argv``, as this test's /proc
    shows them: a sandboxed child's commands have pids of their own namespace, so a test
    finds them by what they run (a unique argument: ``sleep 300.<mark>``)."""
    wanted = b"".join(arg.encode() + b"\0" for arg in argv)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read() == wanted and alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
