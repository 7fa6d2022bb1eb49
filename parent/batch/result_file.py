"""The ``-o`` file of ``isoagent batch``: result lines, signed, read back to resume.

Resuming skips the tasks with an ``ok`` line in ``-o`` that isoagent signed (``signature``:
a key of the user's that children cannot read), whose task is the same (its ``digest`` of
agent and prompt). A writing child can reach that file (it may lie in the workspace), so an
unsigned or changed ``ok`` line proves nothing: it counts as not written and its task runs
again (``--adopt`` trusts such lines: a file from another user or an older isoagent). The
signature goes with the line, so a copied or moved ``-o`` resumes wherever it is. A task
whose id has a signed line for another task (its prompt or agent changed under the same id)
is refused: not run, said, and counted as not ok, so that an id never gets a second ok line.

``-o`` is opened without following a link: inside the workspace (or a folder added to it)
every folder on the way from there is opened ``O_NOFOLLOW``, and the file too, so a child
that swapped ``results/`` for a folder of its own holding ``out.jsonl -> ~/.bash_aliases``
gets the resume refused, not writing there.

A full disk (a child filling its temp folder) loses no line: a line is written whole or
not at all (what a failed write left is cut off again); a line that cannot be written waits,
and is handed back (``unwritten``) if it never could be; the batch starts no task after it.
What the tasks that wrote no line cost (cut short by the budget, interrupted) is kept in a
ledger in the run base (``batch-<hash of -o's path>.spent``), so that a resume goes on with
the same ``--max-budget-usd``; the lines' own ``cost_usd`` are the rest of it.

``-o`` must be a regular file (resume reads it; ``/dev/full`` or a pipe would never end),
read line by line with a bound on each. One batch holds it at a time (``flock``): a
second one is refused, naming the first one's pid, before it reads or runs anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import msgspec

from isoagent.parent.batch.input import BatchTask, TaskId, is_json
from isoagent.parent.batch.signature import LineSigner
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.records.run_folder import open_base

_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
MAX_LINE_BYTES = 64 << 20  # of a line read back from -o: a longer one is refused, unread
CUT_LINE_START = b'{"id":'  # how a result line starts, as it is written


class BatchRefused(Exception):
    """The batch cannot use its ``-o``; ``usage`` when the command line names the wrong file."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass
class Previous:
    """What an earlier batch left in ``-o``: the ok lines trusted, by id (``done``), the
    invalid lines reported, how many ok lines were not isoagent's (``forged``: their tasks
    run again), and what the tasks cost (``spent``: their lines' and the ledger's)."""

    done: dict[TaskId, TaskRecord] = field(default_factory=dict)
    reported: set[tuple[TaskId, str]] = field(default_factory=set)
    forged: int = 0
    spent: float = 0.0

    def sort(self, tasks: Iterable[BatchTask]) -> tuple[list[BatchTask], list[TaskRecord]]:
        """The tasks still to run, and the ``done`` lines of those that need not; a task
        whose id has a line for another task (another prompt or agent) is in neither:
        ``changed`` says it."""
        pending: list[BatchTask] = []
        finished: list[TaskRecord] = []
        for task in tasks:
            record = self.done.get(task.id)
            if record is None:
                pending.append(task)
            elif not record.digest or record.digest == task.digest:
                finished.append(record)
        return pending, finished

    def changed(self, tasks: Iterable[BatchTask], output: Path) -> list[TaskRecord]:
        """An ``invalid`` record for each task whose id has an ok line for another task."""
        return [
            TaskRecord(
                task.id,
                "invalid",
                task.line,
                error=f"id {task.id!r} has a result in {output} for another "
                "prompt or agent: not run (give the task a new id, or take its line out of "
                f"{output} to run it again)",
            )
            for task in tasks
            if (done := self.done.get(task.id)) is not None
            and done.digest
            and done.digest != task.digest
        ]


class ResultFile:
    """``-o``, opened for appending; call it with a record to write it, signed."""

    def __init__(
        self,
        runs_dir: Path,
        output: Path,
        reach: Sequence[Path] = (),
        *,
        adopt: bool = False,
        signer: LineSigner | None = None,
    ) -> None:
        """``reach``: the folders children may write (the workspace, added folders): from
        there down, no link is followed. ``adopt``: trust the ok lines isoagent did not
        sign. Raises OSError if either file cannot be opened, BatchRefused if ``output``
        is a link, not a regular file, or another batch holds it."""
        self.path = output
        self.adopt = adopt
        self.fd = _open_output(output, reach)
        try:
            _hold(self.fd, output)
            self.signer = signer or LineSigner()
            self.ledger = _open_ledger(runs_dir, output)
        except BaseException:
            os.close(self.fd)
            raise
        self.waiting: list[bytes] = []  # lines not written yet (the disk was full)
        self.error: OSError | None = None  # why the first of them could not be
        self._encoder = msgspec.json.Encoder()

    def previous(self) -> Previous:
        """What the file holds, of the lines isoagent signed; the others are counted
        (``forged``), unless ``adopt``.

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
                    elif is_json(line):
                        self._take(previous, line, number)
                        os.write(self.fd, b"\n")
                    elif line.startswith(CUT_LINE_START):
                        os.ftruncate(self.fd, end)
                    else:
                        self._refuse(number, "is not a result line")
            with os.fdopen(os.dup(self.ledger), "rb") as file:
                previous.spent += sum(_spent_decoder.decode(x).spent_usd for x in _lines(file))
        except OSError as exc:
            raise BatchRefused(f"cannot read {self.path}: {exc.strerror or exc}") from None
        return previous

    def _take(self, previous: Previous, line: bytes, number: int) -> None:
        try:
            record = record_decoder.decode(line)
        except msgspec.DecodeError:
            self._refuse(number, "is not a result line")
        if not (self.signer.verify(line) or self.adopt):
            previous.forged += record.status == "ok"
            return
        previous.spent += record.cost_usd
        if record.status == "ok":
            previous.done[record.id] = record
        elif record.status == "invalid":
            previous.reported.add((record.id, record.error))

    def _refuse(self, number: int, why: str) -> NoReturn:
        raise BatchRefused(
            f"--output {self.path} is not isoagent batch output (line {number} {why}): "
            "name another file",
            usage=True,
        )

    def __call__(self, record: object) -> None:
        self.waiting.append(self.signer.sign(self._encoder.encode(record)))
        self.write_waiting()

    def write_waiting(self) -> None:
        """Write the lines that wait, in order, until one fails (``error`` says why)."""
        while self.waiting:
            try:
                _append_whole(self.fd, self.waiting[0] + b"\n")
            except OSError as exc:
                self.error = exc
                return
            self.waiting.pop(0)
        self.error = None

    def unwritten(self) -> list[bytes]:
        """The lines that could not be written, tried once more first."""
        self.write_waiting()
        return self.waiting

    def spent(self, usd: float) -> None:
        """What tasks that wrote no line cost, for a resume's budget (best effort: a ledger
        that cannot take it is a resume that may spend that much again)."""
        if usd > 0:
            with contextlib.suppress(OSError):
                _append_whole(self.ledger, _encoder.encode(Spent(usd)) + b"\n")

    def close(self) -> None:
        """Let go of the file (another batch may hold it now) and of the ledger."""
        for fd in (self.fd, self.ledger):
            os.close(fd)

    def __enter__(self) -> ResultFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Spent(msgspec.Struct):
    """A ledger line: what tasks that wrote no line in ``-o`` cost."""

    spent_usd: float


_spent_decoder = msgspec.json.Decoder(Spent)
_encoder = msgspec.json.Encoder()


def _lines(file: Iterable[bytes]) -> Iterable[bytes]:
    """The whole lines of a ledger (a line cut by a kill is left out)."""
    return (line for line in file if line.endswith(b"\n") and line.strip())


def _open_output(output: Path, reach: Sequence[Path]) -> int:
    """``output`` opened for appending, no link followed on the way from the folder of
    ``reach`` that holds it (a child may have planted one), nor as the file itself; a path
    out of the children's reach is the user's own, links and all (``/dev/stdout``)."""
    path = Path(os.path.abspath(output))
    anchors = [folder for folder in reach if path.parent.is_relative_to(folder)]
    if not anchors:  # O_NONBLOCK: a fifo opens at once, to be refused
        return os.open(path, _APPEND & ~os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    anchor = min(anchors, key=lambda folder: len(folder.parts))
    folder = os.open(anchor, _FOLDER)
    try:
        for name in path.parent.relative_to(anchor).parts:
            inner = os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(path.name, _APPEND | os.O_NONBLOCK, 0o666, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link_on_the_way(path, anchor):
            raise BatchRefused(
                f"--output {output} goes through a symbolic link (a child may have planted "
                "it): name the file itself",
                usage=True,
            ) from None
        exc.filename = str(output)
        raise
    finally:
        os.close(folder)


def _is_link_on_the_way(path: Path, anchor: Path) -> bool:
    """Whether ``path`` or a folder between ``anchor`` and it is a symbolic link now."""
    return any(
        os.path.islink(anchor.joinpath(*path.relative_to(anchor).parts[:n]))
        for n in range(1, len(path.relative_to(anchor).parts) + 1)
    )


def _output_key(output: Path) -> str:
    """``-o``'s key, in the names of what the run base keeps for it."""
    return hashlib.sha256(os.fsencode(output.resolve())).hexdigest()[:32]


def batches_journal(runs_dir: Path, output: Path) -> Path:
    """Where ``--api-batches`` keeps the Message Batches it sent for ``output``."""
    return runs_dir / f"batch-{_output_key(output)}.batches.jsonl"


def _open_ledger(runs_dir: Path, output: Path) -> int:
    name = f"batch-{_output_key(output)}.spent"
    try:
        base = open_base(runs_dir)
        try:
            return os.open(name, _APPEND, 0o600, dir_fd=base)
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


record_decoder = msgspec.json.Decoder(TaskRecord)  # a line of -o, read back
