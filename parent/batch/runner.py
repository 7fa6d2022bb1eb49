"""Running a batch: resume from ``-o``, N tasks at once in one session, a line per task.

No click here: ``isoagent batch`` (``parent/cli/batch.py``) is the command line over it, and
a Python caller can drive the same run. Notices for the user go to ``say`` (one line each).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import msgspec

from isoagent.parent.batch.display import BatchDisplay
from isoagent.parent.batch.input import BatchTask, TaskId, label
from isoagent.parent.batch.result_file import ResultFile
from isoagent.parent.events import ChildFinished, TaskRecord
from isoagent.protocol import Result

if TYPE_CHECKING:
    from isoagent.parent.session import Session


def say_on_stderr(line: str) -> None:
    print(f"isoagent: {line}", file=sys.stderr, flush=True)


class BatchRefused(Exception):
    """The batch cannot start: ``usage`` when the command line names the wrong file."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass
class Previous:
    """What an earlier batch left in ``-o``: the ids done (ok), the invalid lines reported,
    and how many ok lines were not the parent's (their tasks run again)."""

    done: set[TaskId] = field(default_factory=set)
    reported: set[tuple[TaskId, str]] = field(default_factory=set)
    forged: int = 0


@dataclass
class Outcome:
    """How a batch ended: ``failed`` of ``total`` not ok; ``stopped``, why it stopped early;
    ``unwritten``, whether some line could not be written to ``-o``."""

    total: int
    failed: int
    stopped: str = ""
    unwritten: bool = False


class _Stopped(Exception):
    """No task can succeed (the API refused the key): the batch stops at once."""


class BatchRun:
    def __init__(
        self,
        pending: list[BatchTask],
        invalid: list[TaskRecord],
        reported: set[tuple[TaskId, str]],
        write: Callable[[TaskRecord], None],
        results: ResultFile | None,  # -o, if given (write is its)
        *,
        live: bool = False,
        say: Callable[[str], None] = say_on_stderr,
    ) -> None:
        self.pending = pending
        self.invalid = invalid
        self.reported = reported
        self.write = write
        self.results = results
        self.resumable = results is not None
        self.say = say
        self.waiting_told = False  # that -o could not be written, once
        self.records: list[TaskRecord] = []
        self.display = BatchDisplay(len(pending) + len(invalid), live=live)

    async def run(self, session: Session) -> Outcome:
        self.display.start(session.waits)
        for record in self.invalid:  # each bad line once in the output, on stderr every time
            if (record.id, record.error) not in self.reported:
                self.write(record)
            self.display.task_finished(record, ran=False)
        queue = iter(self.pending)
        ticker = asyncio.create_task(self._tick())
        again = ": run it again with the same -o to resume" if self.resumable else ""
        stopped = ""
        try:
            try:
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(session.settings.max_parallel, len(self.pending))):
                        group.create_task(self._worker(session, queue))
            except* _Stopped as group:  # the other tasks were ended: it says why
                stopped = str(group.exceptions[0])
        except asyncio.CancelledError:
            self.display.close(f"; interrupted{again}")
            self._hand_back_unwritten()
            raise
        finally:
            ticker.cancel()
        self.display.close("; stopped" if stopped else "")
        unwritten = self._hand_back_unwritten()
        outcome = self._finish(session)
        if stopped:
            self.say(f"batch stopped: {stopped}{again}")
            outcome.stopped = stopped
        outcome.unwritten = unwritten
        return outcome

    def _hand_back_unwritten(self) -> bool:
        """Put on stdout the result lines -o could not take (a full disk), and say so."""
        results = self.results
        if results is None or not (lines := results.unwritten()):
            return False
        try:
            sys.stdout.buffer.write(b"".join(line + b"\n" for line in lines))
            sys.stdout.buffer.flush()
        except OSError:
            pass
        why = results.error.strerror if results.error else "?"
        count = f"{len(lines)} result {'line' if len(lines) == 1 else 'lines'}"
        self.say(
            f"error: cannot write {count} to {results.path} ({why}): they are on "
            "stdout instead; their tasks run again when the batch is resumed"
        )
        return True

    async def _worker(self, session: Session, queue: Iterator[BatchTask]) -> None:
        from isoagent.parent.children.supervisor import ChildRequest, describe

        for task in queue:
            self.display.task_started()
            title = f"{label(task.id, task.line)}: {describe(task.prompt)}"
            request = ChildRequest(title, task.prompt, task.agent)
            record = task_record(task, await session.supervisor.run(request))
            self.write(record)
            if self.results and self.results.waiting and not self.waiting_told:
                self.waiting_told = True
                why = self.results.error.strerror if self.results.error else "?"
                self.say(
                    f"cannot write {self.results.path} for now ({why}): its lines "
                    "wait and are tried again with each next one"
                )
            self.records.append(record)
            self.display.task_finished(record)
            if (rejected := session.gateway.rejected) is not None:  # so would every task be
                raise _Stopped(rejected.message)

    async def _tick(self) -> None:
        while self.display.live:
            await asyncio.sleep(1)
            self.display.draw()

    def _finish(self, session: Session) -> Outcome:
        records = self.records
        failed = sum(r.status != "ok" for r in records) + len(self.invalid)
        total = len(records) + len(self.invalid)
        usage = session.gateway.usage
        result = Result(
            summary=f"{total - failed} of {total} tasks ok",
            status="error" if failed else "ok",
            turns=sum(r.turns for r in records),
            tool_calls=sum(r.tool_calls for r in records),
            usage=usage,
            duration=round(time.monotonic() - self.display.started, 3),
            error=f"{failed} of {total} tasks not ok" if failed else "",
        )
        session.finish(result)
        return Outcome(total, failed)


def task_record(task: BatchTask, finished: ChildFinished) -> TaskRecord:
    result = finished.result
    return TaskRecord(
        id=task.id,
        status=result.status,
        line=task.line,
        agent=finished.agent,
        summary=result.summary,
        turns=result.turns,
        tool_calls=result.tool_calls,
        tokens=result.usage,
        seconds=result.duration,
        transcript=finished.transcript,
        error=result.error,
        retries=finished.retries,
    )


def read_previous(path: Path, ledger: ResultFile) -> Previous:
    """The ids with an ok line in ``path``, and the invalid lines already reported there:
    of the lines ``ledger`` says isoagent wrote; the others are counted (``forged``).

    Every line must be a result line, or the file is someone else's: refused, untouched. A
    last line cut short (the batch was killed while writing it) is cut off; a whole one that
    only lacks its newline gets it, so the lines appended next stay lines.
    """
    try:
        with path.open("r+b") as file:
            data = file.read()
            complete, _, last = data.rpartition(b"\n")
            lines = complete.split(b"\n") if complete else []
            records = [
                (_result_line(path, line, number), ledger.trusts(line))
                for number, line in enumerate(lines, 1)
                if line.strip()
            ]
            if last:
                if _is_json(last):
                    records.append((_result_line(path, last, len(lines) + 1), ledger.trusts(last)))
                    file.write(b"\n")
                elif last.startswith(CUT_LINE_START):
                    file.truncate(len(data) - len(last))
                else:
                    _refuse(path, len(lines) + 1)
    except FileNotFoundError:
        return Previous()
    except OSError as exc:
        raise BatchRefused(f"cannot read {path}: {exc.strerror or exc}") from None
    forged = sum(not trusted and r.status == "ok" for r, trusted in records)
    trusted_records = [r for r, trusted in records if trusted]
    done = {r.id for r in trusted_records if r.status == "ok"}
    reported = {(r.id, r.error) for r in trusted_records if r.status == "invalid"}
    return Previous(done, reported, forged)


CUT_LINE_START = b'{"id":'  # how a result line starts, as JsonLines writes it
_record_decoder = msgspec.json.Decoder(TaskRecord)


def _result_line(path: Path, line: bytes, number: int) -> TaskRecord:
    try:
        return _record_decoder.decode(line)
    except msgspec.DecodeError:
        _refuse(path, number)


def _refuse(path: Path, number: int) -> NoReturn:
    raise BatchRefused(
        f"--output {path} is not isoagent batch output (line {number} is not a result line): "
        "name another file",
        usage=True,
    )


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True
