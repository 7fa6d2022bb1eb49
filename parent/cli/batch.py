"""``isoagent batch``: one subagent process per input line, at most ``-j`` at once."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NoReturn

import click
import msgspec

from isoagent.parent.batch.display import BatchDisplay
from isoagent.parent.batch.input import (
    BatchTask,
    LineTooLong,
    TaskId,
    label,
    parse_tasks,
    read_lines,
)
from isoagent.parent.batch.result_file import ResultFile
from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import fail, run_command
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.options import pick_agent, settings_options
from isoagent.parent.cli.output import JsonLines, end_when_reader_goes
from isoagent.parent.events import ChildFinished, TaskRecord
from isoagent.parent.settings import Settings
from isoagent.protocol import Result

if TYPE_CHECKING:
    from isoagent.parent.session import Session

EPILOG = f"""\b
Input, one task per line:
  {{"id": "a1", "prompt": "...", "agent": "Explore"}}   (id and agent optional)
  or a plain-text prompt; a task without an id is known by a hash of its
  agent and prompt, so adding or moving lines keeps every task's id.

\b
Output, one JSON line per task as it finishes:
  id, status, line, agent, summary, turns, tool_calls, tokens, seconds,
  transcript, error, retries (model calls tried again: rate limit, overload).
  status is a child's (ok, max_turns, error, timeout, crashed, budget) or
  invalid for a line that could not be run.

\b
Examples:
  isoagent batch tasks.jsonl -j 8 -o results.jsonl
  cat tasks.jsonl | isoagent batch - -j 8 | jq -r .summary

{EXIT_CODES_HELP}"""


@click.command(epilog=EPILOG)
@click.argument("source_name", metavar="FILE")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    help="Tasks running at once (default: --max-parallel).",
)
@click.option(
    "-o",
    "--output",
    "output_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the result lines to this file instead of stdout. Tasks whose id already "
    "has an ok line there are skipped, so re-running the batch resumes it.",
)
@click.option(
    "--agent", "-a", "agent_name", default="general-purpose", show_default=True,
    help="Agent type for lines that name none (see `isoagent agents`).",
)  # fmt: skip
@click.option(
    "--api-batches",
    is_flag=True,
    help="Send the model calls as Anthropic Message Batches: half the price, each turn as "
    "slow as a batch (minutes, up to 24 h; raise --timeout). See the README.",
)
@click.option(
    "--batch-window",
    type=click.FloatRange(0),
    default=Settings.batch_window,
    show_default=True,
    metavar="SECONDS",
    help="With --api-batches: how long a model call waits for the others to join its batch "
    "(it goes at once when every running task waits).",
)
@settings_options
def batch(
    source_name: str,
    jobs: int | None,
    output_path: Path | None,
    agent_name: str,
    api_batches: bool,
    batch_window: float,
    settings: Settings,
) -> None:
    """Run one subagent per line of FILE ('-' for stdin), each in its own process.

    Progress goes to stderr; one JSON line per task goes to stdout or to --output,
    written as soon as the task ends, so an interrupted batch loses no finished task.
    """
    source = open_tasks(source_name)
    if output_path is not None and same_file(source, output_path):
        fail(f"--output {output_path} is the input file: name another file", ExitCode.USAGE)
    if jobs is not None:
        settings = dataclasses.replace(settings, max_parallel=jobs)
    settings = dataclasses.replace(settings, api_batches=api_batches, batch_window=batch_window)
    pick_agent(settings.agents, agent_name)
    where = "stdin" if source_name == "-" else source_name
    try:
        with source:
            items = list(parse_tasks(read_lines(source), settings.agents, agent_name))
    except LineTooLong as exc:
        fail(f"{where}: {exc}", ExitCode.USAGE)
    except OSError as exc:
        fail(f"cannot read {where}: {exc.strerror or exc}", ExitCode.USAGE)
    results = None
    done: set[TaskId] = set()
    reported: set[tuple[TaskId, str]] = set()
    if output_path is not None:
        try:
            results = ResultFile(settings.runs_dir, output_path)
        except OSError as exc:
            fail(f"cannot write {exc.filename}: {exc.strerror or exc}")
        done, reported = read_previous(output_path, results)
        if api_batches:  # a rerun answers the turns already sent from their batches
            journal = settings.runs_dir / f"batch-{results.key}.batches.jsonl"
            settings = dataclasses.replace(settings, batch_journal=journal)
        # a writing child must not truncate or unlink it under the parent's open file
        settings = dataclasses.replace(settings, kept_files=(output_path.resolve(),))
    pending = [t for t in items if isinstance(t, BatchTask) and t.id not in done]
    invalid = [r for r in items if isinstance(r, TaskRecord)]
    skipped = sum(isinstance(t, BatchTask) and t.id in done for t in items)
    if skipped:
        tasks = "task" if skipped == 1 else "tasks"
        click.echo(f"isoagent: skipping {skipped} {tasks} already done in {output_path}", err=True)
    stdout = JsonLines()
    runner = _BatchRun(pending, invalid, reported, results or stdout, results)
    # on a terminal the batch line replaces the per-child progress lines
    sinks = [] if runner.display.live else [ProgressDisplay(verbose=settings.verbose)]

    async def main() -> int:
        from isoagent.parent.session import Session

        async with Session.open(settings, sinks=sinks) as session:
            if output_path is None:
                end_when_reader_goes(session, stdout)
            return await runner.run(session)

    run_command(main)


class _Stopped(Exception):
    """No task can succeed (the API refused the key): the batch stops at once."""


class _BatchRun:
    def __init__(
        self,
        pending: list[BatchTask],
        invalid: list[TaskRecord],
        reported: set[tuple[TaskId, str]],
        write: Callable[[TaskRecord], None],
        results: ResultFile | None,  # -o, if given (write is its)
    ) -> None:
        self.pending = pending
        self.invalid = invalid
        self.reported = reported
        self.write = write
        self.results = results
        self.resumable = results is not None
        self.waiting_told = False  # that -o could not be written, once
        self.records: list[TaskRecord] = []
        self.display = BatchDisplay(len(pending) + len(invalid), live=sys.stderr.isatty())

    async def run(self, session: Session) -> int:
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
        code = self._finish(session)
        if stopped:
            click.echo(f"isoagent: batch stopped: {stopped}{again}", err=True)
            return ExitCode.ERROR
        return ExitCode.ERROR if unwritten else code

    def _hand_back_unwritten(self) -> bool:
        """Put on stdout the result lines -o could not take (a full disk), and say so."""
        results = self.results
        if results is None or not (lines := results.unwritten()):
            return False
        with contextlib.suppress(OSError):
            sys.stdout.buffer.write(b"".join(line + b"\n" for line in lines))
            sys.stdout.buffer.flush()
        why = results.error.strerror if results.error else "?"
        count = f"{len(lines)} result {'line' if len(lines) == 1 else 'lines'}"
        click.echo(
            f"isoagent: error: cannot write {count} to {results.path} ({why}): they are on "
            "stdout instead; their tasks run again when the batch is resumed",
            err=True,
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
                click.echo(
                    f"isoagent: cannot write {self.results.path} for now ({why}): its lines "
                    "wait and are tried again with each next one",
                    err=True,
                )
            self.records.append(record)
            self.display.task_finished(record)
            if (rejected := session.gateway.rejected) is not None:  # so would every task be
                raise _Stopped(rejected.message)

    async def _tick(self) -> None:
        while self.display.live:
            await asyncio.sleep(1)
            self.display.draw()

    def _finish(self, session: Session) -> int:
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
        return ExitCode.TASKS_FAILED if failed else ExitCode.OK


def open_tasks(name: str) -> BinaryIO:
    """FILE, or stdin for '-', as bytes (each line is decoded on its own); unreadable input
    is a usage error."""
    if name != "-":
        try:
            return open(name, "rb")
        except OSError as exc:
            fail(f"cannot read {name}: {exc.strerror or exc}", ExitCode.USAGE)
    if sys.stdin is None:
        fail("reading tasks from stdin, but stdin is closed", ExitCode.USAGE)
    if sys.stdin.isatty():
        fail("reading tasks from stdin, but stdin is a terminal", ExitCode.USAGE)
    return sys.stdin.buffer


def same_file(source: BinaryIO, path: Path) -> bool:
    """Whether ``path`` is (a link to) the file ``source`` reads."""
    try:
        return os.path.samestat(os.fstat(source.fileno()), path.stat())
    except OSError:
        return False


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


def read_previous(path: Path, ledger: ResultFile) -> tuple[set[TaskId], set[tuple[TaskId, str]]]:
    """The ids with an ok line in ``path``, and the invalid lines already reported there:
    of the lines ``ledger`` says isoagent wrote; the others are counted out loud.

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
        return set(), set()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    if forged := sum(not trusted and r.status == "ok" for r, trusted in records):
        click.echo(
            f"isoagent: warning: {forged} ok {'line' if forged == 1 else 'lines'} in {path} "
            "not written by isoagent batch (changed, added by another process, or older): "
            "their tasks run again",
            err=True,
        )
    trusted_records = [r for r, trusted in records if trusted]
    done = {r.id for r in trusted_records if r.status == "ok"}
    reported = {(r.id, r.error) for r in trusted_records if r.status == "invalid"}
    return done, reported


CUT_LINE_START = b'{"id":'  # how a result line starts, as JsonLines writes it
_record_decoder = msgspec.json.Decoder(TaskRecord)


def _result_line(path: Path, line: bytes, number: int) -> TaskRecord:
    try:
        return _record_decoder.decode(line)
    except msgspec.DecodeError:
        _refuse(path, number)


def _refuse(path: Path, number: int) -> NoReturn:
    fail(
        f"--output {path} is not isoagent batch output (line {number} is not a result line): "
        "name another file",
        ExitCode.USAGE,
    )


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True
