"""Reading a screenshot: a PNG's pixels, with the standard library only (zlib)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4}  # colour type: RGB, RGBA (8 bits each, what Chromium writes)


def pixel_rows(path: Path) -> list[list[tuple[int, int, int]]]:
    """The image's rows of (r, g, b), alpha dropped; a non-interlaced 8-bit RGB(A) PNG."""
    data = path.read_bytes()
    assert data.startswith(_SIGNATURE), f"{path} is not a PNG"
    at, idat = len(_SIGNATURE), b""
    width = height = channels = 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in _CHANNELS and not interlace, (depth, colour)
            channels = _CHANNELS[colour]
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[list[tuple[int, int, int]]] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = _unfilter(
            raw[start], bytearray(raw[start + 1 : start + 1 + stride]), previous, channels
        )
        rows.append([tuple(line[x : x + 3]) for x in range(0, stride, channels)])  # type: ignore[misc]
        previous = line
    return rows


def _unfilter(kind: int, line: bytearray, above: bytearray, bpp: int) -> bytearray:
    """PNG's five row filters (RFC 2083, 6.2)."""
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = above[i]
        corner = above[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            nearest = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + nearest) & 0xFF
    return line
