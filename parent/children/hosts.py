"""Where children run and how they get there: ``--hosts`` and its companions, as settings.

A hosts spec is ``name[:slots]`` entries separated by commas, or ``@FILE`` with one
entry a line (``#`` starts a comment). ``local`` is this machine, started without a
launcher. (Only the standard library here: the CLI reads its settings before it knows
whether it will run anything.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOCAL = "local"
DEFAULT_LAUNCHER = "ssh -T {host} --"
DEFAULT_REMOTE_PYTHON = "python3"
DEFAULT_HEARTBEAT = 15.0
DEFAULT_LAUNCH_TIMEOUT = 120.0  # a Slurm queue can hold a child this long before it starts


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


@dataclass(frozen=True)
class RemoteSettings:
    """Where children run (``--hosts``) and how they get there."""

    hosts: tuple[HostEntry, ...]
    launcher: str = DEFAULT_LAUNCHER  # a command line; {host} becomes a host's name
    remote_python: str = DEFAULT_REMOTE_PYTHON  # the interpreter with isoagent, on the hosts
    remote_workdir: str = ""  # the workspace on the hosts; "": the local workspace's path
    heartbeat: float = DEFAULT_HEARTBEAT  # seconds of silence that make a link dead
    retries: int = 2  # launches after a failed one (or a lost link)
    retry_crashed: bool = False  # also retry a child that crashed after its Hello
    launch_timeout: float = DEFAULT_LAUNCH_TIMEOUT  # launcher start until Hello, queue included

    @property
    def slots(self) -> int:
        return sum(host.slots for host in self.hosts)
