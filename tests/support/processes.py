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


def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
