"""Length-prefixed msgpack frames.

Each frame is a 4-byte big-endian length and then that many bytes of msgpack.
There is no line limit, so one 50 MB tool output travels as one frame; the
length is checked against ``MAX_FRAME`` so garbage on the pipe is an error at
once instead of a wait for gigabytes that will never come.
"""

from __future__ import annotations

import os
import struct
from typing import TypeVar

import msgspec

from protocol.frames import ChildFrame, ParentFrame

MAX_FRAME = 1 << 30  # 1 GiB
HEADER = struct.Struct(">I")

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[object, msgspec.msgpack.Decoder] = {
    ChildFrame: msgspec.msgpack.Decoder(ChildFrame),
    ParentFrame: msgspec.msgpack.Decoder(ParentFrame),
}


class FrameError(Exception):
    """The byte stream is not a valid sequence of frames."""


def encode_frame(frame: msgspec.Struct) -> bytes:
    body = _encoder.encode(frame)
    return HEADER.pack(len(body)) + body


def frame_parts(frame: msgspec.Struct) -> tuple[bytes, bytes]:
    """Header and body apart, for writers that can send both without joining them."""
    body = _encoder.encode(frame)
    return HEADER.pack(len(body)), body


def check_length(header: bytes | bytearray) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise FrameError(f"frame header announces {length} bytes (limit {MAX_FRAME}): not a frame")
    return length


def decode_frame(body: bytes | bytearray, union: object) -> object:
    """Decode one frame body as a member of ``union`` (ChildFrame or ParentFrame)."""
    try:
        return _decoders[union].decode(body)
    except msgspec.DecodeError as exc:
        raise FrameError(f"undecodable frame ({len(body)} bytes): {exc}") from None


class FrameWriter:
    """Writes frames to a file descriptor (blocking)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, frame: msgspec.Struct) -> None:
        # writev: no copy of a 50 MB body just to put 4 bytes in front of it
        parts = [memoryview(part) for part in frame_parts(frame)]
        while parts:
            written = os.writev(self.fd, parts)
            while parts and written >= len(parts[0]):
                written -= len(parts.pop(0))
            if parts:
                parts[0] = parts[0][written:]


class FrameReader:
    """Reads frames from a file descriptor (blocking). ``None`` means clean EOF."""

    def __init__(self, fd: int, union: object) -> None:
        self.fd = fd
        self.union = union

    def _read_exactly(self, n: int) -> bytearray | None:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            count = os.readv(self.fd, [view[got:]])
            if not count:
                if got:
                    raise FrameError(f"stream ended inside a frame ({got} of {n} bytes)")
                return None
            got += count
        return buffer

    def read(self) -> object | None:
        header = self._read_exactly(HEADER.size)
        if header is None:
            return None
        length = check_length(header)
        body = self._read_exactly(length) if length else bytearray()
        if body is None:
            raise FrameError(f"stream ended after a header announcing {length} bytes")
        return decode_frame(body, self.union)
