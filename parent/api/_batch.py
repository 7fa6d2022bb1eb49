"""``isoagent.batch``/``abatch``: ``isoagent batch`` from Python, on the same runner
(``parent/batch/runner.py``) in one ``Session``: one fork server, gateway and rate limiter;
each task's line as it finishes; resumed from ``output`` as ``-o`` is."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from isoagent._calls import on_a_loop_of_its_own, options_with
from isoagent._session import NoticeStream, Session, _settings, notice
from isoagent.errors import IsoagentError, OptionError
from isoagent.parent.batch.input import (
    BatchTask,
    LineTooLong,
    parse_tasks,
    read_lines,
    unknown_agent,
)
from isoagent.parent.batch.result_file import (
    BatchRefused,
    Previous,
    ResultFile,
    batches_journal,
)
from isoagent.parent.batch.runner import BatchRun
from isoagent.parent.options import Options
from isoagent.parent.records.events import TaskRecord

# a prompt, {"prompt": ..., "id": ..., "agent": ...}, or a line of a JSONL file (read_tasks)
Task = str | Mapping[str, str] | bytes


class _HandedResultFile(ResultFile):
    """``output``, each line written there also handed to the caller."""

    def __init__(
        self,
        runs_dir: Path,
        output: Path,
        reach: Sequence[Path],
        hand: Callable[[TaskRecord], None],
    ) -> None:
        super().__init__(runs_dir, output, reach)
        self.hand = hand

    def __call__(self, record: object) -> None:
        super().__call__(record)
        assert isinstance(record, TaskRecord)
        self.hand(record)


def read_tasks(path: str | Path) -> list[bytes]:
    """The lines of a JSONL task file (``isoagent batch``'s input), for ``batch``/``abatch``:
    each is checked as that command checks it when the batch runs."""
    try:
        with open(path, "rb") as file:
            return list(read_lines(file))
    except (OSError, LineTooLong) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise OptionError(f"cannot read tasks from {path}: {why}") from None


def abatch(
    tasks: Iterable[Task],
    *,
    jobs: int | None = None,
    agent: str = "general-purpose",
    output: str | Path | None = None,
    options: Options | None = None,
    **kw: Any,
) -> AsyncGenerator[TaskRecord, None]:
    """Each task's ``TaskRecord`` (the line ``isoagent batch`` writes) as it finishes, at
    most ``jobs`` at once (default: ``max_parallel``). A task is a prompt or a mapping of
    ``prompt``, ``id`` and ``agent`` (default: ``agent``), as a line of ``isoagent batch``
    (``read_tasks`` reads a file of them); a bad one is a record of status ``invalid``.
    With ``output``, each line is appended there before it is yielded, and the tasks with
    an ok line there already are skipped, their records yielded first: running the same
    batch again resumes it. What cannot be used is refused here, at the call
    (``OptionError``), not when the records are first asked for."""
    if isinstance(tasks, str | bytes | Path):
        raise OptionError(
            f"tasks must be prompts or task mappings, not one {type(tasks).__name__}: to "
            "read a JSONL file of them, isoagent.batch(isoagent.read_tasks(path))"
        )
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise OptionError(f"jobs must be a whole number of at least 1, not {jobs!r}")
    options = options_with(options, kw)
    if jobs is not None:
        options = options.replace(max_parallel=jobs)
    settings = _settings(options)
    if agent not in settings.agents:
        raise OptionError(unknown_agent(agent, settings.agents))
    lines = [_line(task) for task in tasks]
    return _records(lines, agent, output, options, settings)


async def _records(
    lines: list[bytes], agent: str, output: str | Path | None, options: Options, settings: Any
) -> AsyncGenerator[TaskRecord, None]:
    items = list(parse_tasks(lines, settings.agents, agent))
    finished: asyncio.Queue[TaskRecord] = asyncio.Queue()
    results: ResultFile | None = None
    previous = Previous()
    if output is not None:
        path = Path(output)
        try:
            reach = (settings.workdir, *settings.add_dirs)
            results = _HandedResultFile(settings.runs_dir, path, reach, finished.put_nowait)
            previous = results.previous()
        except (OSError, BatchRefused) as exc:
            if results is not None:
                results.close()
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise IsoagentError(f"cannot use {path}: {why}") from None
        # a writing child must not truncate or unlink it under the parent's open file
        settings = dataclasses.replace(settings, kept_files=(path.resolve(),))
        if settings.api_batches:  # a rerun answers the turns already sent from their batches
            journal = batches_journal(settings.runs_dir, path)
            settings = dataclasses.replace(settings, batch_journal=journal)
        settings = dataclasses.replace(settings, budget_spent=previous.spent)
    tasks_to_do = [t for t in items if isinstance(t, BatchTask)]
    pending, done = previous.sort(tasks_to_do)
    changed = previous.changed(tasks_to_do, Path(output)) if output is not None else []
    invalid = [r for r in items if isinstance(r, TaskRecord)]
    reported = [r for r in invalid if (r.id, r.error) in previous.reported]
    for record in [*done, *changed, *reported]:  # a resumed batch's ended tasks, from the file
        finished.put_nowait(record)
    runner = BatchRun(
        pending, invalid, previous.reported, results, finished.put_nowait, say=notice,
        changed=changed, stream=NoticeStream(),
    )  # fmt: skip
    session = Session(options)
    session._settings = settings
    try:
        async with session:
            running = asyncio.ensure_future(runner.run(session._session))
            try:
                while not (running.done() and finished.empty()):
                    if not finished.empty():
                        yield finished.get_nowait()
                        continue
                    getting = asyncio.ensure_future(finished.get())
                    await asyncio.wait({running, getting}, return_when=asyncio.FIRST_COMPLETED)
                    if getting.done():
                        yield getting.result()
                    else:
                        getting.cancel()
                running.result()  # what went wrong, if something did
            finally:
                if not running.done():  # the caller stopped early: end the tasks running
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)
    finally:
        if results is not None:
            results.close()


def batch(tasks: Iterable[Task], **kw: Any) -> Iterator[TaskRecord]:
    """``abatch`` without asyncio: each task's ``TaskRecord`` as it finishes. Leaving the
    loop early ends the tasks still running (their lines are not written: a resume runs
    them). Inside a running event loop (a Jupyter cell) the batch runs on a worker thread.
    What cannot be used is refused here, at the call."""
    records = abatch(tasks, **kw)
    return _synchronously(records)


def _synchronously(records: AsyncGenerator[TaskRecord, None]) -> Iterator[TaskRecord]:
    with on_a_loop_of_its_own() as call, asyncio.Runner() as loop:
        try:
            while True:
                try:
                    yield call(loop.run, _next(records))
                except StopAsyncIteration:
                    return
        finally:
            call(loop.run, records.aclose())
            call(loop.close)


async def _next(records: AsyncGenerator[TaskRecord, None]) -> TaskRecord:
    return await anext(records)


_encoder = msgspec.json.Encoder()


def _line(task: Task) -> bytes:
    """A task as its line of ``isoagent batch``'s input."""
    if isinstance(task, bytes):
        return task
    if isinstance(task, str):
        return _encoder.encode({"prompt": task})
    return _encoder.encode(dict(task))
