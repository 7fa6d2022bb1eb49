"""The ``-o`` file of ``isoagent batch``, and the ledger of what the parent wrote to it.

Resuming skips the tasks with an ``ok`` line in ``-o``. A writing child can reach that
file (it may lie in the workspace), so an ``ok`` line there proves nothing: a child could
append one for a task that never ran, and resume would skip it. So the parent also keeps
the SHA-256 of every line it writes to ``-o`` in a ledger in the run base
(``.isoagent/runs/batch-<hash of -o's path>.sha256``: read-only to sandboxed children,
opened without following a link), and resume trusts only the lines found there. A line
that is not (forged, changed, or written by an older isoagent) counts as not written:
its task runs again. With ``--sandbox off`` a child can write the ledger too.

A full disk (a child filling its temp folder) loses no line: a line is written whole or
not at all (what a failed write left is cut off again), its digest before it; a line
that cannot be written waits, is tried again with the next one, and is handed back
(``unwritten``) if it never could be.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from isoagent.parent.run_folder import open_base

_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class ResultFile:
    """``-o``, opened for appending, with its ledger; call it with a record to write it."""

    def __init__(self, runs_dir: Path, output: Path) -> None:
        """Raises OSError if either cannot be opened."""
        key = hashlib.sha256(os.fsencode(output.resolve())).hexdigest()[:32]
        self.key = key  # -o's, in the names of what the run base keeps for it
        name = f"batch-{key}.sha256"
        try:
            base = open_base(runs_dir)
            try:
                self.ledger = os.open(name, _APPEND | os.O_NOFOLLOW, 0o600, dir_fd=base)
            finally:
                os.close(base)
        except OSError as exc:
            exc.filename = str(runs_dir / name)
            raise
        with os.fdopen(os.dup(self.ledger), "rb") as file:
            self.written = set(file.read().split())
        self.path = output
        self.fd = os.open(output, _APPEND, 0o666)
        self.waiting: list[bytes] = []  # lines not written yet (the disk was full)
        self.error: OSError | None = None  # why the first of them could not be
        self._encoder = msgspec.json.Encoder()

    def trusts(self, line: bytes) -> bool:
        """Whether ``line`` (without its newline) is one the parent wrote."""
        return _digest(line) in self.written

    def __call__(self, record: object) -> None:
        self.waiting.append(self._encoder.encode(record))
        self.write_waiting()

    def write_waiting(self) -> None:
        """Write the lines that wait, in order, until one fails (``error`` says why)."""
        while self.waiting:
            line = self.waiting[0]
            digest = _digest(line)
            try:  # its digest first: a batch killed in between leaves a digest of no line
                _append_whole(self.ledger, digest + b"\n")
                _append_whole(self.fd, line + b"\n")
            except OSError as exc:
                self.error = exc
                return
            self.written.add(digest)
            self.waiting.pop(0)
        self.error = None

    def unwritten(self) -> list[bytes]:
        """The lines that could not be written, tried once more first."""
        self.write_waiting()
        return self.waiting


def _append_whole(fd: int, data: bytes) -> None:
    """Append all of ``data``, or nothing: a failed write's part is cut off again."""
    end = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        os.ftruncate(fd, end)  # needs no space
        raise


def _digest(line: bytes) -> bytes:
    return hashlib.sha256(line).hexdigest().encode()
