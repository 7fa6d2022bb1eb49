"""Frames between the parent and its fork server (``python -m isoagent.child.forkserver FD``).

They travel over a ``SOCK_SEQPACKET`` Unix socket pair: one frame is one
message (no length prefix needed), and a ``Spawn`` carries the child's stdin,
stdout and stderr pipe ends alongside it as ``SCM_RIGHTS`` file descriptors (an
``Attach``, the socket of another parent the server is to serve too).
"""

from __future__ import annotations

from typing import Literal

import msgspec

MAX_MESSAGE = 1 << 20  # one Spawn (an environment and a path) is far below this


Program = Literal["child", "hands"]  # python -m isoagent.child, or isoagent.child.hands


class Spawn(msgspec.Struct, tag=True):
    """Fork a child with this environment and working directory (its stdin, stdout and
    stderr ride along)."""

    request: int  # echoed in the answer: an answer to a request given up on is ignored
    env: dict[str, str]
    cwd: str
    pid_namespace: bool = False  # the child is pid 1 of a pid namespace of its own
    program: Program = "child"  # what the fork runs: a child, or the parent's hands
    args: list[str] = []  # its arguments (the hands': its confinement)


class Attach(msgspec.Struct, tag=True):
    """Serve one more parent (a warm daemon's session): its end of a new socket pair rides
    along; its ``Spawn`` requests come on that socket, and its children's answers go there."""


class Spawned(msgspec.Struct, tag=True):
    request: int
    pid: int


class SpawnFailed(msgspec.Struct, tag=True):
    """The fork itself failed (say, EAGAIN under a process limit), or the request was bad."""

    request: int
    error: str


class Exited(msgspec.Struct, tag=True):
    """A forked child ended; ``returncode`` as in subprocess (negative: killed by that signal)."""

    pid: int
    returncode: int


ServerRequest = Spawn | Attach
ServerReply = Spawned | SpawnFailed | Exited

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(ServerRequest)
_reply_decoder = msgspec.msgpack.Decoder(ServerReply)


def encode(frame: msgspec.Struct) -> bytes:
    return _encoder.encode(frame)


def decode_request(data: bytes) -> Spawn | Attach:
    return _request_decoder.decode(data)


def decode_reply(data: bytes) -> Spawned | SpawnFailed | Exited:
    return _reply_decoder.decode(data)
