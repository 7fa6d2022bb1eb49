"""What this user's isoagent wrote, checkable: a run's ``run.jsonl`` is sealed as it is
written, and only a sealed run is continued (``--continue``, ``--resume``) or is ``logs
last``.

The seal, ``run.jsonl.seal`` beside it, holds how many bytes of the transcript it covers and
their HMAC-SHA256 under the user's key (``user_key.user_key``), bound to the run's id and
the file's name; it is rewritten in place after each line. A repository can plant a run
folder (``git add -f .isoagent/runs/<id>/run.jsonl``) with any turns it likes, but not a
seal that verifies: the key never leaves the user's state folder, which no child can read.
Every line is covered, so a run the user committed cannot be altered either; lines past the
seal (a crash between the two writes) are not part of the run. A run that verifies is one
this user's isoagent wrote, wherever it is now (a moved project keeps its runs). The key
also signs ``batch -o`` lines (``batch/signature.py``), over other input: a seal's always
begins with its context, ``isoagent transcript seal``, a line with ``{``.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import stat
from io import FileIO
from pathlib import Path

import msgspec

from isoagent.parent.records.events import AnyEvent, decode_event
from isoagent.parent.records.run_folder import RunFolder
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.records.user_key import user_key

SUFFIX = ".seal"
LOG = "run.jsonl"
_RECORD = b"%020d %s\n"  # length, HMAC in hex: one fixed size, rewritten in place
_RECORD_SIZE = 20 + 1 + 64 + 1
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def _context(run_id: str, name: str) -> bytes:
    return f"isoagent transcript seal 1\0{run_id}/{name}\0".encode()


class Seal:
    """The running seal of one transcript: ``add`` each line once it is written."""

    def __init__(self, file: FileIO, key: bytes, run_id: str, name: str) -> None:
        self._file = file
        self._mac = hmac.new(key, _context(run_id, name), "sha256")
        self._length = 0

    def add(self, line: bytes) -> None:
        self._mac.update(line)
        self._length += len(line)
        record = _RECORD % (self._length, self._mac.hexdigest().encode())
        with contextlib.suppress(OSError):  # a seal that lags covers less: the run is shorter
            os.pwrite(self._file.fileno(), record, 0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()


def seal_for(run: RunFolder, name: str = LOG) -> Seal | None:
    """A new seal for transcript ``name`` of ``run``; None, said once, when the user's key
    cannot be had (the run is written, but cannot be continued)."""
    try:
        key = user_key()
        file = run.create_file(name + SUFFIX)
    except OSError as exc:
        warn(f"warning: run {run.run_id} cannot be sealed ({exc.strerror or exc}): "
             "it cannot be continued later")  # fmt: skip
        return None
    return Seal(file, key, run.run_id, name)


def sealed_bytes(run: Path, name: str = LOG) -> bytes | None:
    """What of transcript ``name`` in run folder ``run`` this user's isoagent sealed; None
    when nothing verifies (no seal, another key's, a changed line, a link)."""
    try:
        folder = os.open(run, _OPEN | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        record = _read(name + SUFFIX, folder, _RECORD_SIZE)
        if len(record) != _RECORD_SIZE or record[20:21] != b" ":
            return None
        length, digest = int(record[:20]), record[21:85]
        data = _read(name, folder, length)
        key = user_key()
    except (OSError, ValueError):
        return None
    finally:
        os.close(folder)
    mac = hmac.new(key, _context(run.name, name) + data, "sha256").hexdigest().encode()
    return data if len(data) == length and hmac.compare_digest(mac, digest) else None


def sealed_events(run: Path, name: str = LOG) -> list[AnyEvent] | None:
    """The events of a sealed transcript (``sealed_bytes``); None when it is not sealed."""
    data = sealed_bytes(run, name)
    if data is None:
        return None
    events = []
    for line in data.splitlines():
        with contextlib.suppress(msgspec.DecodeError):
            events.append(decode_event(line))
    return events


def first_line(run: Path, name: str = LOG, limit: int = 64 * 1024) -> bytes:
    """The first line of transcript ``name`` in run folder ``run``, unchecked (b"": none, or
    not a regular file: a planted link or FIFO is not read)."""
    try:
        fd = os.open(run / name, _OPEN | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, limit).split(b"\n", 1)[0]
    except OSError:
        return b""
    finally:
        os.close(fd)


def is_sealed(run: Path) -> bool:
    return sealed_bytes(run) is not None


def _read(name: str, folder: int, size: int) -> bytes:
    """At most ``size`` bytes of regular file ``name`` in ``folder`` (no link, no FIFO)."""
    fd = os.open(name, _OPEN | os.O_NONBLOCK, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{name} is not a regular file")
        chunks, left = [], size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
