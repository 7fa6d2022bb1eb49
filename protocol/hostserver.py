"""Frames between the parent and a host server (``python -m isoagent.child.hostserver``).

One host server runs on each remote host for the run, started once through the
launcher; its stdin and stdout carry these frames (length-prefixed, as the child's
own), and through them the pipes of every child it forks: each child is a channel.
A child's own frames travel inside ``Data`` as the bytes they are. The server's
argument is the heartbeat: silent that long, the parent is gone and the server ends.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

STDIN: Final = 0
STDOUT: Final = 1
STDERR: Final = 2


class Open(msgspec.Struct, tag=True):
    """Fork a child on channel ``channel``."""

    channel: int


class Data(msgspec.Struct, tag=True):
    """Bytes of a child's pipe: its stdin from the parent; its stdout or stderr to it.
    Empty ``data``: that pipe is closed."""

    channel: int
    stream: Literal[0, 1, 2]
    data: bytes


class Ping(msgspec.Struct, tag=True):
    """ "Still here", both ways, every third of the heartbeat; the server answers each."""


class Opened(msgspec.Struct, tag=True):
    channel: int
    pid: int


class OpenFailed(msgspec.Struct, tag=True):
    channel: int
    error: str


class Closed(msgspec.Struct, tag=True):
    """The child on ``channel`` has ended (``returncode`` as in subprocess)."""

    channel: int
    returncode: int


class Ready(msgspec.Struct, tag=True):
    """The server has loaded and speaks ``version`` (the child protocol's)."""

    version: int


ToServer = Open | Data | Ping
FromServer = Ready | Opened | OpenFailed | Data | Closed | Ping
