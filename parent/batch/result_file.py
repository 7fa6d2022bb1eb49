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

``-o`` must be a regular file (resume reads it; ``/dev/full`` or a pipe would never end),
read line by line with a bound on each. One batch holds it at a time (``flock``): a
second one is refused, naming the first one's pid, before it reads or runs anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import msgspec

from isoagent.parent.batch.input import TaskId
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.records.run_folder import open_base

_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
MAX_LINE_BYTES = 64 << 20  # of a line read back from -o: a longer one is refused, unread
CUT_LINE_START = b'{"id":'  # how a result line starts, as it is written


class BatchRefused(Exception):
    """The batch cannot use its ``-o``; ``usage`` when the command line names the wrong file."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass
class Previous:
    """What an earlier batch left in ``-o``: the ids done (ok), the invalid lines reported,
    and how many ok lines were not the parent's (``forged``: their tasks run again)."""

    done: set[TaskId] = field(default_factory=set)
    reported: set[tuple[TaskId, str]] = field(default_factory=set)
    forged: int = 0


class ResultFile:
    """``-o``, opened for appending, with its ledger; call it with a record to write it."""

    def __init__(self, runs_dir: Path, output: Path) -> None:
        """Raises OSError if either cannot be opened, BatchRefused if ``output`` is not a
        regular file or another batch holds it."""
        self.path = output
        # O_NONBLOCK: a fifo opens at once, to be refused
        self.fd = os.open(output, _APPEND | os.O_NONBLOCK, 0o666)
        try:
            _hold(self.fd, output)
            self.ledger = _open_ledger(runs_dir, output)
        except BaseException:
            os.close(self.fd)
            raise
        with os.fdopen(os.dup(self.ledger), "rb") as file:
            self.written = set(file.read().split())
        self.waiting: list[bytes] = []  # lines not written yet (the disk was full)
        self.error: OSError | None = None  # why the first of them could not be
        self._encoder = msgspec.json.Encoder()

    def trusts(self, line: bytes) -> bool:
        """Whether ``line`` (without its newline) is one the parent wrote."""
        return _digest(line) in self.written

    def previous(self) -> Previous:
        """What the file holds, of the lines the ledger says isoagent wrote; the others are
        counted (``forged``).

        Every line must be a result line, or the file is someone else's: refused, untouched.
        A last line cut short (the batch was killed while writing it) is cut off; a whole
        one that only lacks its newline gets it, so the lines appended next stay lines.
        """
        previous = Previous()
        end = 0  # of the last whole line
        try:
            with os.fdopen(os.dup(self.fd), "rb") as file:
                file.seek(0)
                lines = iter(lambda: file.readline(MAX_LINE_BYTES + 1), b"")
                for number, line in enumerate(lines, 1):
                    if line.endswith(b"\n"):
                        end += len(line)
                        if line.strip():
                            self._take(previous, line[:-1], number)
                    elif len(line) > MAX_LINE_BYTES:
                        self._refuse(number, f"is longer than {MAX_LINE_BYTES >> 20} MiB")
                    elif _is_json(line):
                        self._take(previous, line, number)
                        os.write(self.fd, b"\n")
                    elif line.startswith(CUT_LINE_START):
                        os.ftruncate(self.fd, end)
                    else:
                        self._refuse(number, "is not a result line")
        except OSError as exc:
            raise BatchRefused(f"cannot read {self.path}: {exc.strerror or exc}") from None
        return previous

    def _take(self, previous: Previous, line: bytes, number: int) -> None:
        try:
            record = record_decoder.decode(line)
        except msgspec.DecodeError:
            self._refuse(number, "is not a result line")
        if not self.trusts(line):
            previous.forged += record.status == "ok"
        elif record.status == "ok":
            previous.done.add(record.id)
        elif record.status == "invalid":
            previous.reported.add((record.id, record.error))

    def _refuse(self, number: int, why: str) -> NoReturn:
        raise BatchRefused(
            f"--output {self.path} is not isoagent batch output (line {number} {why}): "
            "name another file",
            usage=True,
        )

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

    def close(self) -> None:
        """Let go of the file (another batch may hold it now) and of the ledger."""
        for fd in (self.fd, self.ledger):
            os.close(fd)

    def __enter__(self) -> ResultFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _output_key(output: Path) -> str:
    """``-o``'s key, in the names of what the run base keeps for it."""
    return hashlib.sha256(os.fsencode(output.resolve())).hexdigest()[:32]


def batches_journal(runs_dir: Path, output: Path) -> Path:
    """Where ``--api-batches`` keeps the Message Batches it sent for ``output``."""
    return runs_dir / f"batch-{_output_key(output)}.batches.jsonl"


def _open_ledger(runs_dir: Path, output: Path) -> int:
    name = f"batch-{_output_key(output)}.sha256"
    try:
        base = open_base(runs_dir)
        try:
            return os.open(name, _APPEND | os.O_NOFOLLOW, 0o600, dir_fd=base)
        finally:
            os.close(base)
    except OSError as exc:
        exc.filename = str(runs_dir / name)
        raise


def _hold(fd: int, path: Path) -> None:
    """Refuse ``fd`` unless it is a regular file that no other batch holds; then hold it
    (until it is closed, or the process ends, however it ends)."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        raise BatchRefused(
            f"--output {path} is not a regular file: a batch resumes from its -o, so it must "
            "be one (leave -o out to write the lines to stdout)",
            usage=True,
        )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _lock_holder(status)
        who = f"another isoagent batch (pid {pid})" if pid else "another process"
        raise BatchRefused(
            f"--output {path} is being written by {who}: wait for it to end, or name another file"
        ) from None


def _lock_holder(status: os.stat_result) -> int | None:
    """The pid that holds a lock on the file of ``status``, from ``/proc/locks``."""
    file = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    with contextlib.suppress(OSError), open("/proc/locks") as locks:
        for line in locks:
            fields = line.split()
            if len(fields) > 5 and fields[1] != "->" and fields[5] == file:
                return int(fields[4])
    return None


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


record_decoder = msgspec.json.Decoder(TaskRecord)  # a line of -o, read back


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True
