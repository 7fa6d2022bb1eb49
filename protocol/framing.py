"""Length-prefixed msgpack frames.

Each frame is a 4-byte big-endian length and then that many bytes of msgpack.
There is no line limit, so one 50 MB tool output travels as one frame; the
length is checked against ``MAX_FRAME`` so garbage on the pipe is an error at
once instead of a wait for gigabytes that will never come. A reader that must not
hold a body that large (the parent, for an untrusted child) hands it to a ``Spill``.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from typing import Protocol

import msgspec

from isoagent.protocol.frames import ChildFrame, ParentFrame
from isoagent.protocol.hands import FromHands, ToHands
from isoagent.protocol.hostserver import FromServer, ToServer

MAX_FRAME = 1 << 30  # 1 GiB
MAPPED_BODY = 1 << 20  # bodies this large or larger are read into a mapping of their own
SPILL_PIECE = 1 << 20  # bytes of a spilled body gathered before each write to its spill
HEADER = struct.Struct(">I")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[object, msgspec.msgpack.Decoder] = {
    ChildFrame: msgspec.msgpack.Decoder(ChildFrame),
    ParentFrame: msgspec.msgpack.Decoder(ParentFrame),
    ToServer: msgspec.msgpack.Decoder(ToServer),
    FromServer: msgspec.msgpack.Decoder(FromServer),
    ToHands: msgspec.msgpack.Decoder(ToHands),
    FromHands: msgspec.msgpack.Decoder(FromHands),
}


class FrameError(Exception):
    """The byte stream is not a valid sequence of frames."""


def encode_frame(frame: msgspec.Struct) -> bytes:
    header, body = frame_parts(frame)
    return header + body


def frame_parts(frame: msgspec.Struct) -> tuple[bytes, bytes]:
    """Header and body apart, for writers that can send both without joining them."""
    body = _encoder.encode(frame)
    return HEADER.pack(len(body)), body


def check_length(header: bytes | bytearray) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise FrameError(f"frame header announces {length} bytes (limit {MAX_FRAME}): not a frame")
    return length


def decode_frame(body: bytes | bytearray | mmap.mmap, union: object) -> object:
    """Decode one frame body as a member of ``union`` (ChildFrame or ParentFrame; a host
    server's ToServer or FromServer; the parent's hands' ToHands or FromHands)."""
    try:
        return _decoders[union].decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise FrameError(f"undecodable frame ({len(body)} bytes): {exc}") from None


# What msgspec makes of a msgpack item, in bytes of Python objects (CPython 3.11+, 64 bits), at
# least, as ``decoded_size`` counts it: the object, its garbage collector's header and its
# slot in its container; a str's characters (at most its UTF-8 bytes) and a bin's bytes come
# on top. A map is counted as a dict (a Struct's is smaller, its field names are not made).
SCALAR_BYTES = 48  # an int (a 64-bit one takes 36) or a float
TEXT_BYTES = 88  # a str around its characters (one, two or four bytes each), or bytes
ARRAY_BYTES, ITEM_BYTES = 88, 10  # a list, and each item's slot (with what a list keeps spare)
MAP_BYTES, ENTRY_BYTES = 208, 40  # a dict, and each entry's share of its table
# at most that many bytes of objects per body byte, whatever the body: msgspec's own bound
# (its pull request 367: a crafted message of N bytes allocates at most N * 184)
AMPLIFICATION = 184
# msgpack's items past the fix* ones, by their first byte: the bytes that follow a scalar;
# the length's width (and an ext's type byte) before a str's, bin's or ext's bytes; the
# length's width and the items per count of an array's or a map's
_SCALARS = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_SCALARS |= {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
_BYTES = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}
_BYTES |= {0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)}
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


class _Kind(msgspec.Struct):
    """A frame's tag alone: its other fields are skipped, not decoded."""

    type: str = ""


_KIND = msgspec.msgpack.Decoder(_Kind)


def frame_kind(body: bytes | bytearray | memoryview | mmap.mmap) -> str:
    """The kind (the tag) of the frame in ``body``, decoding nothing else ("": none)."""
    try:
        return _KIND.decode(body).type
    except (msgspec.DecodeError, RecursionError):
        return ""


_WIDER = re.compile(rb"[\xc4-\xff]")  # a UTF-8 lead byte of a character past U+00FF
_WIDEST = re.compile(rb"[\xf0-\xff]")  # and of one past U+FFFF


def _text_width(body: bytes | bytearray | memoryview | mmap.mmap, start: int, end: int) -> int:
    """Bytes a character of the UTF-8 text ``body[start:end]`` takes in a str: 1, 2 or 4
    (one character past U+00FF makes every character of its str two bytes; one past
    U+FFFF, four). Searched in C, nothing copied."""
    if not _WIDER.search(body, start, end):
        return 1
    return 4 if _WIDEST.search(body, start, end) else 2


def decoded_size(body: bytes | bytearray | memoryview | mmap.mmap, limit: int) -> int:
    """About how many bytes of Python objects decoding msgpack ``body`` makes (at least what
    it makes), counted item by item without making any: what a body's bytes alone cannot
    bound, since one byte (an empty list) decodes into eighty. Counting stops once past
    ``limit``; a body that is not msgpack is a ``FrameError``."""
    size = 0
    left = 1  # items still to count: containers add theirs
    at = 0
    try:
        while left and size <= limit:
            left -= 1
            kind = body[at]
            at += 1
            if 0xA0 <= kind < 0xC0:  # a fixstr: at most 31 bytes, each a character of 4
                count = kind & 0x1F
                at += count
                size += TEXT_BYTES + 4 * count
            elif 0x80 <= kind < 0x90:  # a fixmap
                count = kind & 0x0F
                left += 2 * count
                size += MAP_BYTES + ENTRY_BYTES * count
            elif 0x90 <= kind < 0xA0:  # a fixarray
                count = kind & 0x0F
                left += count
                size += ARRAY_BYTES + ITEM_BYTES * count
            elif kind < 0x80 or kind >= 0xE0:  # a fixint
                size += SCALAR_BYTES
            elif kind in _CONTAINERS:
                width, items = _CONTAINERS[kind]
                count = int.from_bytes(body[at : at + width], "big")
                at += width
                left += items * count
                size += (
                    ARRAY_BYTES + ITEM_BYTES * count
                    if items == 1
                    else MAP_BYTES + ENTRY_BYTES * count
                )
            elif kind in _BYTES:
                width, typed = _BYTES[kind]
                count = int.from_bytes(body[at : at + width], "big")
                at += width + typed
                wide = kind >= 0xD9 and _text_width(body, at, at + count)
                at += count
                size += TEXT_BYTES + (wide or 1) * count
            elif kind in _SCALARS:
                at += _SCALARS[kind]
                size += SCALAR_BYTES
            else:
                raise FrameError(
                    f"undecodable frame ({len(body)} bytes): byte {kind:#x} at {at - 1}"
                )
    except IndexError:
        raise FrameError(f"undecodable frame ({len(body)} bytes): it ends inside an item") from None
    return size


def _body_buffer(length: int) -> bytearray | mmap.mmap:
    """A frame body's buffer. A bytearray is zero-filled when it is made: for 50 MB,
    a 20 ms stall (page faults) between a frame's header and its first body byte.
    A body of ``MAPPED_BODY`` bytes or more gets an anonymous mapping instead, whose
    pages are faulted in as the bytes arrive. (Huge pages would fault less but, when
    the kernel must compact memory for them, stall for 100 ms now and then.)"""
    if length < MAPPED_BODY:
        return bytearray(length)
    return mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


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


class Spill(Protocol):
    """Where the body of a frame too large to hold goes, piece by piece, as it arrives."""

    def write(self, piece: memoryview) -> None: ...

    def frame(self) -> object:
        """The frame, once the whole body was written."""
        ...

    def close(self) -> None:
        """Drop what was written (the stream ended inside the body, or the frame was taken)."""


class FrameAssembler:
    """Frames out of a byte stream that arrives in pieces of any size; no I/O of its own.

    A reader puts the next bytes into ``buffer()`` (the rest of the current header, or
    of the current body, allocated once at its announced size) and reports them with
    ``advance``; one that is handed bytes objects (an asyncio protocol) calls ``feed``.
    Either way a 50 MB body is written once, where it is decoded. A body longer than
    ``in_memory`` bytes is not held: ``spill(length)`` gets it, in pieces of at most
    ``SPILL_PIECE`` bytes, and makes the frame of it.
    """

    def __init__(
        self,
        union: object,
        *,
        in_memory: int = MAX_FRAME,
        spill: Callable[[int], Spill] | None = None,
        check: Callable[[bytearray | mmap.mmap], None] | None = None,
    ) -> None:
        """``check``: looks at each body held in memory before it is decoded; it may
        raise (a ``FrameError``) to refuse it."""
        self.union = union
        self.in_memory = in_memory
        self.spill = spill
        self.check = check
        self.length = 0  # the body length of the frame being read, or read last
        self._header = bytearray(HEADER.size)
        self._body: bytearray | mmap.mmap | None = None  # None while reading a header
        self._spilled: Spill | None = None  # where the current body goes instead
        self._written = 0  # bytes of the current body given to the spill
        self._part = memoryview(self._header)
        self._got = 0

    def buffer(self) -> memoryview:
        """Where the next bytes of the stream go; never past the current frame's end."""
        return self._part[self._got :]

    def advance(self, count: int) -> object | None:
        """``count`` more bytes are in ``buffer()``: the frame they complete, if any."""
        self._got += count
        if self._got < len(self._part):
            return None
        if self._spilled is not None:
            return self._spill_piece()
        if self._body is None:
            self.length = length = check_length(self._header)
            if length > self.in_memory and self.spill is not None:
                self._spilled = self.spill(length)
                self._part, self._got = memoryview(bytearray(min(length, SPILL_PIECE))), 0
                return None
            try:
                self._body = _body_buffer(length)
            except (MemoryError, OSError) as exc:
                raise FrameError(f"no memory for a frame of {length} bytes: {exc!r}") from None
            self._part, self._got = memoryview(self._body), 0
            if len(self._body):
                return None
        body, self._body = self._body, None
        self._part.release()
        self._part, self._got = memoryview(self._header), 0
        try:
            if self.check is not None:
                self.check(body)
            return decode_frame(body, self.union)
        finally:
            if isinstance(body, mmap.mmap):
                body.close()  # the frame holds copies of what it needs: unmap now

    def _spill_piece(self) -> object | None:
        """A piece of a spilled body is complete: write it; the frame, after the last."""
        assert self._spilled is not None
        self._spilled.write(self._part)
        self._written += len(self._part)
        if left := self.length - self._written:
            self._part, self._got = self._part[:left], 0  # the same piece, once more
            return None
        spilled, self._spilled = self._spilled, None
        self._part, self._got, self._written = memoryview(self._header), 0, 0
        try:
            return spilled.frame()
        finally:
            spilled.close()

    def feed(self, data: bytes) -> Iterator[object]:
        """Every frame that ``data`` completes, in order (a ``FrameError`` after the
        good ones); consume it whole."""
        view = memoryview(data)
        while view:
            count = self._copy(view)
            view = view[count:]
            if (frame := self.advance(count)) is not None:
                yield frame

    def _copy(self, data: memoryview) -> int:
        """Copy what fits of ``data`` into ``buffer()``. No view of the buffer outlives
        the call: a mapped body cannot be closed while one does."""
        part = self.buffer()
        count = min(len(part), len(data))
        part[:count] = data[:count]
        return count

    def received(self) -> int | None:
        """How many bytes of the current frame's body have come (``None``: no body is)."""
        if self._body is None and self._spilled is None:
            return None
        return self._written + self._got

    def end(self) -> None:
        """The stream has ended: a ``FrameError`` if it ended inside a frame."""
        got = self.received()
        self.close()
        if got is not None:
            raise FrameError(f"stream ended inside a frame ({got} of {self.length} bytes)")
        if self._got:
            raise FrameError("stream ended inside a frame header")

    def close(self) -> None:
        """Drop a spilled body under way: no more of the stream will be read."""
        if self._spilled is not None:
            self._spilled.close()
            self._spilled = None


class FrameReader:
    """Reads frames from a file descriptor (blocking). ``None`` means clean EOF.

    It reads no byte past the frame it returns."""

    def __init__(self, fd: int, union: object) -> None:
        self.fd = fd
        self._frames = FrameAssembler(union)

    def read(self) -> object | None:
        while True:
            count = os.readv(self.fd, [self._frames.buffer()])
            if not count:
                self._frames.end()
                return None
            if (frame := self._frames.advance(count)) is not None:
                return frame
