"""Where children run: ``--hosts`` parsed into a pool of hosts with slots.

A spec is ``name[:slots]`` entries separated by commas, or ``@FILE`` with one entry a
line (``#`` starts a comment). ``local`` is this machine, started without a launcher.
The pool places each child on the host with the most free slots (the first listed on a
tie), never on one already tried for that task while another is left, and marks a
host down, once, after ``DOWN_AFTER`` launch failures in a row.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

LOCAL = "local"
DOWN_AFTER = 3  # launch failures in a row that take a host out of the run


class HostSpecError(ValueError):
    """A ``--hosts`` value that cannot be used; the message says which part and why."""


@dataclass(frozen=True)
class HostEntry:
    name: str
    slots: int = 1

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL


def parse_hosts(spec: str) -> list[HostEntry]:
    """``hostA:8,hostB:8`` or ``@FILE``; a clear ``HostSpecError`` for anything else."""
    if spec.startswith("@"):
        path = Path(spec[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HostSpecError(f"cannot read the hosts file {path}: {_why(exc)}") from None
        items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        where = f"in {path}"
    else:
        items = [item.strip() for item in spec.split(",")]
        where = "in --hosts"
    entries = [_entry(item, where) for item in items if item]
    if not entries:
        raise HostSpecError(f"no host {where}")
    names = [entry.name for entry in entries]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        raise HostSpecError(f"host {duplicates[0]!r} is listed twice {where}")
    return entries


def _entry(item: str, where: str) -> HostEntry:
    name, _, slots = item.rpartition(":") if ":" in item else (item, "", "1")
    if not name or any(c.isspace() for c in name) or name.startswith("-"):
        raise HostSpecError(f"{item!r} {where} is not a host name[:slots]")
    try:
        count = int(slots)
    except ValueError:
        count = 0
    if count < 1:
        raise HostSpecError(f"{item!r} {where}: slots must be a whole number of at least 1")
    return HostEntry(name, count)


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


class NoHostLeft(Exception):
    """Every host that could take this task is down."""


class HostPool:
    """Free slots per host: ``acquire`` waits for one, ``release`` gives it back."""

    def __init__(self, entries: list[HostEntry]) -> None:
        self.entries = entries
        self._free = {entry.name: entry.slots for entry in entries}
        self._failures = dict.fromkeys(self._free, 0)  # launch failures in a row
        self.down: set[str] = set()
        self._changed = asyncio.Event()

    @property
    def slots(self) -> int:
        return sum(entry.slots for entry in self.entries)

    async def acquire(self, tried: Collection[str] = ()) -> HostEntry:
        """A host with a free slot, one not in ``tried`` while such a host is up;
        ``NoHostLeft`` when every host is down."""
        while True:
            up = [entry for entry in self.entries if entry.name not in self.down]
            if not up:
                raise NoHostLeft("every host is marked down")
            fresh = [entry for entry in up if entry.name not in tried] or up
            free = [entry for entry in fresh if self._free[entry.name] > 0]
            if free:
                best = max(free, key=lambda entry: self._free[entry.name])  # first on a tie
                self._free[best.name] -= 1
                return best
            self._changed.clear()
            await self._changed.wait()

    def release(self, host: HostEntry, launched: bool | None) -> None:
        """Give ``host``'s slot back. ``launched``: whether a launch there worked (None:
        nothing was launched, or the host is this machine)."""
        self._free[host.name] += 1
        if launched is True:
            self._failures[host.name] = 0
        elif launched is False:
            self._failures[host.name] += 1
            if self._failures[host.name] >= DOWN_AFTER and host.name not in self.down:
                self.down.add(host.name)
                print(
                    f"isoagent: host {host.name} marked down for this run after "
                    f"{DOWN_AFTER} failed launches in a row",
                    file=sys.stderr,
                )
        self._changed.set()
