"""Running a batch: resume from ``-o``, N tasks at once in one session, a line per task.

No click here: ``isoagent batch`` (``parent/cli/batch.py``) is the command line over it, and
a Python caller can drive the same run. Notices for the user go to ``say`` (one line each).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from isoagent.parent.batch.display import BatchDisplay
from isoagent.parent.batch.input import BatchTask, TaskId, label
from isoagent.parent.batch.result_file import BatchRefused, ResultFile, record_decoder
from isoagent.parent.records.costs import Costs
from isoagent.parent.records.events import ChildFinished, TaskRecord
from isoagent.parent.records.figures import plural, usd
from isoagent.protocol import Result

if TYPE_CHECKING:
    from isoagent.parent.session import Session


def say_on_stderr(line: str) -> None:
    print(f"isoagent: {line}", file=sys.stderr, flush=True)


@dataclass
class Outcome:
    """How a batch ended: ``failed`` of ``total`` not ok; ``stopped``, why it stopped early
    (``over_budget``: a budget of its was spent); ``unwritten``, whether some line
    could not be written."""

    total: int
    failed: int
    stopped: str = ""
    unwritten: bool = False
    over_budget: bool = False


class _Stopped(Exception):
    """No task can succeed (the API refused the key): the batch stops at once."""


class BatchRun:
    """One batch in a session: each line to ``results`` (``-o``) if given, else to
    ``stdout``, which also gets the lines ``results`` could not take.

    When ``stdout`` fails (a full disk), no task starts any more; the lines so far and
    those of the tasks still running are kept in the run folder's ``results.jsonl``,
    which a batch run again with it as ``-o`` resumes from. When ``results`` fails, no task
    starts any more either; the lines it could not take go to ``stdout``, signed, to be
    appended to it once there is room. ``changed``: tasks not run because their id has a
    line for another task; each is said, and counted as not ok.
    """

    def __init__(
        self,
        pending: list[BatchTask],
        invalid: list[TaskRecord],
        reported: set[tuple[TaskId, str]],
        results: ResultFile | None,
        stdout: Callable[[TaskRecord], None],
        *,
        live: bool = False,
        say: Callable[[str], None] = say_on_stderr,
        changed: Sequence[TaskRecord] = (),
        stream: TextIO | None = None,
    ) -> None:
        """``say``: where notices go, ``stream``: the progress display's (default: stderr)."""
        self.pending = pending
        self.changed = changed
        self.invalid = invalid
        self.reported = reported
        self.results = results
        self.stdout = stdout
        self.say = say
        self.waiting_told = False  # that -o could not be written, once
        self.written: list[TaskRecord] = []  # the lines of this batch, in order
        self.records: list[TaskRecord] = []
        self.stdout_error: OSError | None = None  # why stdout failed, if it did
        self.kept: ResultFile | None = None  # the run folder's results, once stdout failed
        self.kept_error = ""  # why its lines could not be kept in the run folder then
        count = len(pending) + len(invalid) + len(changed)
        self.display = BatchDisplay(count, stream, live=live)
        self.costs = Costs()  # each task's, by its child's id (at the run's price rate)
        self.over_budget = 0  # tasks a budget of the batch ended or kept from starting
        self.lined_usd = 0.0  # what the tasks whose line was written cost

    async def run(self, session: Session) -> Outcome:
        try:
            return await self._run(session)
        finally:
            if self.results is not None:  # what tasks without a line cost: a resume's budget
                self.results.spent(self.costs.total - self.lined_usd)
            if self.kept is not None:
                self.kept.close()

    async def _run(self, session: Session) -> Outcome:
        session.answers_kept = True
        session.events.sinks.append(self.costs)
        self.costs.rate = session.price_rate  # its RunStarted went by before it listened
        self.display.start(session.waits, session.run.display(session.run.path))
        for record in self.invalid:  # each bad line once in the output, on stderr every time
            if (record.id, record.error) not in self.reported:
                self._write(session, record)
            self.display.task_finished(record, ran=False)
        for record in self.changed:  # its id's line stays the one line of that id
            self.say(f"error: {record.error}")
            self.display.task_finished(record, ran=False)
        queue = iter(self.pending)
        ticker = asyncio.create_task(self._tick())
        again = ": run it again with the same -o to resume" if self.results else ""
        stopped = ""
        try:
            try:
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(session.settings.max_parallel, len(self.pending))):
                        group.create_task(self._worker(session, queue))
            except* _Stopped as group:  # the other tasks were ended: it says why
                stopped = str(group.exceptions[0])
        except asyncio.CancelledError:
            if session.signal != signal.SIGPIPE:  # stdout's reader left: it ends quietly
                self.display.close(f"; interrupted{again}")
            self._hand_back_unwritten()
            raise
        finally:
            ticker.cancel()
        stopped = (
            stopped
            or self._stdout_failed()
            or self._results_failed()
            or self._budget_spent(session)
        )
        self.display.close("; stopped" if stopped else "")
        unwritten = self._hand_back_unwritten()
        outcome = self._finish(session)
        if self.over_budget and self.results is not None:
            higher = " and a higher --max-budget-usd" if session.cost_budget else ""
            again = f": resumable: run it again with the same -o{higher}"
        if stopped:
            self.say(f"batch stopped: {stopped}{again}")
            outcome.stopped = stopped
        outcome.unwritten = unwritten
        outcome.over_budget = bool(self.over_budget)
        return outcome

    def _write(self, session: Session, record: TaskRecord) -> None:
        """The task's line, written before the task counts as done."""
        self.written.append(record)
        self.lined_usd += record.cost_usd
        if self.results is None and self.stdout_error is None:
            try:
                self.stdout(record)
                return
            except OSError as exc:
                self._keep_in_run_folder(session, exc)
        if self.results is not None:
            self.results(record)

    def _keep_in_run_folder(self, session: Session, error: OSError) -> None:
        """stdout failed: the lines so far, and from now on, go to the run folder's
        ``results.jsonl`` (``kept_error`` says why not, if it cannot be made either)."""
        self.stdout_error = error
        try:
            path = session.run.path / "results.jsonl"
            self.results = self.kept = ResultFile(session.settings.runs_dir, path)
        except (OSError, BatchRefused) as exc:
            self.kept_error = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            return
        for record in self.written[:-1]:
            self.results(record)

    def _budget_spent(self, session: Session) -> str:
        """Why the batch stopped because a budget of its was spent, or ""."""
        if not self.over_budget:
            return ""
        said = []
        if session.token_budget is not None:
            spent = plural(int(session.token_budget.spent), "token")
            said.append(f"{session.token_budget.name}: {spent} so far")
        if session.cost_budget is not None:
            limit = session.settings.max_budget_usd
            said.append(f"--max-budget-usd {limit:g}: {usd(session.cost_budget.spent)} so far")
        tasks = plural(self.over_budget, "task")
        return f"its budget is spent ({'; '.join(said)}): {tasks} not done"

    def _results_failed(self) -> str:
        """Why the batch stopped because -o could not take a line, or ""."""
        results = self.results
        if results is None or results is self.kept or not results.waiting:
            return ""
        why = results.error.strerror if results.error else "?"
        return f"cannot write {results.path} ({why})"

    def _stdout_failed(self) -> str:
        """Why the batch stopped because stdout failed, or "" if it did not."""
        if self.stdout_error is None:
            return ""
        why = f"cannot write to stdout ({self.stdout_error.strerror})"
        if self.results is None:
            return f"{why}, nor keep its lines in the run folder ({self.kept_error})"
        where = self.results.path
        return f"{why}: its lines are in {where}: run it again with -o {where} to resume"

    def _hand_back_unwritten(self) -> bool:
        """Put on stdout the result lines -o could not take (a full disk), and say so."""
        results = self.results
        if results is None or not (lines := results.unwritten()):
            return False
        where = "they are on stdout instead"
        try:
            if self.stdout_error is not None:
                raise self.stdout_error
            for line in lines:
                self.stdout(record_decoder.decode(line))
        except OSError as exc:
            where = f"nor to stdout ({exc.strerror})"
        why = results.error.strerror if results.error else "?"
        count = plural(len(lines), "result line")
        then = (
            f"append them to {results.path} once there is room, and the resume will not "
            "run their tasks again (they are signed)"
            if self.stdout_error is None
            else "their tasks run again when the batch is resumed"
        )
        self.say(f"error: cannot write {count} to {results.path} ({why}): {where}; {then}")
        return True

    async def _worker(self, session: Session, queue: Iterator[BatchTask]) -> None:
        from isoagent.parent.children.child_run import ChildRequest, describe

        while not self._stopping(session) and (task := next(queue, None)) is not None:
            if _spent(session):  # the rest wait for a resume: no line, so not done
                self.over_budget += 1
                continue
            self.display.task_started()
            title = f"{label(task.id, task.line)}: {describe(task.prompt)}"
            request = ChildRequest(title, task.prompt, task.agent)
            finished = await session.supervisor.run(request)
            record = task_record(task, finished, self.costs.usd.get(finished.child, 0.0))
            if record.status == "cancelled" and session.signal:  # it runs again on resume
                self.display.task_finished(record, counted=False)
                continue
            if record.status == "budget":  # cut short by the budget: it runs again on resume
                self.over_budget += 1
                self.display.task_finished(record, counted=False)
                continue
            if session.trace_id:
                record.trace_id = session.trace_id
            self._write(session, record)
            if self.results and self.results.waiting and not self.waiting_told:
                self.waiting_told = True
                why = self.results.error.strerror if self.results.error else "?"
                self.say(
                    f"cannot write {self.results.path} ({why}): no task starts any more; "
                    "the lines of those running wait and are tried again with each next one"
                )
            self.records.append(record)
            self.display.task_finished(record)
            if (rejected := session.gateway.rejected) is not None:  # so would every task be
                raise _Stopped(rejected.message)

    def _stopping(self, session: Session) -> bool:
        """Whether no task may start: a signal ends the batch, or the lines of what ends
        could not be kept."""
        results = self.results
        return bool(session.signal) or (
            self.stdout_error is not None
            or (results is not None and results is not self.kept and bool(results.waiting))
        )

    async def _tick(self) -> None:
        while self.display.live:
            await asyncio.sleep(1)
            self.display.draw()

    def _finish(self, session: Session) -> Outcome:
        records = self.records
        failed = sum(r.status != "ok" for r in records) + len(self.invalid) + len(self.changed)
        total = len(records) + len(self.invalid) + len(self.changed)
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


def _spent(session: Session) -> bool:
    """Whether a budget of the batch's (tokens, US dollars) is spent."""
    budgets = (session.token_budget, session.cost_budget)
    return any(budget is not None and budget.exhausted for budget in budgets)


def task_record(task: BatchTask, finished: ChildFinished, cost: float = 0.0) -> TaskRecord:
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
        cost_usd=round(cost, 6),
        digest=task.digest,
    )
