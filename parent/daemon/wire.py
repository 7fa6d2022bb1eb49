"""What the thin client and the daemon say to each other: standard library only (no msgspec:
its import alone would cost the thin client more than all the rest).

The client sends one ``Invocation`` (a length-prefixed block of NUL-ended strings) with its
stdin, stdout, stderr and working directory as ``SCM_RIGHTS`` descriptors. The daemon
answers with frames of one type byte and a length-prefixed body:

- ``STARTED``: the session's process is running; a pidfd of it rides along, for the
  client to forward its signals to;
- ``EXITED`` (a 4-byte exit status): the session ended, as the command would have;
- ``KILLED`` (a signal number): the session's process was killed before it could end;
- ``REFUSED`` (a reason): the daemon will not run it; the client runs it itself.
"""

from __future__ import annotations

import os
import struct

MAGIC = b"isoagent-invocation-1\0"
HEADER = struct.Struct("!cI")  # type, body length
CODE = struct.Struct("!i")
FDS = 4  # stdin, stdout, stderr, the working directory
MAX_INVOCATION = 16 << 20  # an environment and argv are far below this
MAX_ANSWER = 1 << 16

STARTED, EXITED, KILLED, REFUSED = b"S", b"X", b"K", b"R"


class Invocation:
    """One ``isoagent`` command as its process would have run it (a plain class: the thin
    client cannot afford ``dataclasses``' imports)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], umask: int, closed: str, encodings: list[str]
    ) -> None:
        self.argv = argv
        self.env = env
        self.umask = umask
        self.closed = closed  # which of stdin, stdout, stderr were closed ("0", "02", ...)
        self.encodings = encodings  # stdin's, stdout's and stderr's, each "encoding:errors"

    def encode(self) -> bytes:
        strings = [
            str(self.umask),
            self.closed,
            *self.encodings,
            str(len(self.argv)),
            *self.argv,
            *(f"{k}={v}" for k, v in self.env.items()),
        ]
        body = b"".join(os.fsencode(s) + b"\0" for s in strings)
        return MAGIC + struct.pack("!I", len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> Invocation:
        """ValueError when ``body`` is not one."""
        strings = [os.fsdecode(s) for s in body.split(b"\0")[:-1]]
        if len(strings) < 6:
            raise ValueError("too short")
        umask, closed, *encodings = strings[:5]
        count = int(strings[5])
        argv, pairs = strings[6 : 6 + count], strings[6 + count :]
        if len(argv) != count or any("=" not in pair for pair in pairs):
            raise ValueError("malformed")
        env = dict(pair.split("=", 1) for pair in pairs)
        return cls(argv, env, int(umask), closed, encodings)


def frame(kind: bytes, body: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(body)) + body
