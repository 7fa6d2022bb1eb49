"""``isoagent batch``: one subagent process per input line, at most ``-j`` at once."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from pathlib import Path
from typing import BinaryIO

import click

from isoagent.parent.batch.input import BatchTask, LineTooLong, parse_tasks, read_lines
from isoagent.parent.batch.result_file import BatchRefused, Previous, ResultFile, batches_journal
from isoagent.parent.batch.runner import BatchRun, Outcome
from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import fail, run_command
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.help import GroupedHelp, hide
from isoagent.parent.cli.options import AGENT_MODEL, DEFAULTS, pick_agent, settings_options
from isoagent.parent.cli.output import JsonLines, end_when_reader_goes
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.records.figures import plural
from isoagent.parent.settings import Settings

EPILOG = f"""\b
Input, one task per line:
  {{"id": "a1", "prompt": "...", "agent": "Explore"}}   (id and agent optional)
  or a plain-text prompt; a task without an id is known by a hash of its
  agent and prompt, so adding or moving lines keeps every task's id.

\b
Output, one JSON line per task as it finishes:
  id, status, line, agent, summary, turns, tool_calls, tokens, seconds,
  transcript, error, retries (model calls tried again: rate limit, overload),
  cost_usd, digest (of the task's agent and prompt), sig (isoagent's
  signature: a resume trusts the lines it signed, wherever the file went).
  status is a child's (ok, max_turns, error, timeout, crashed, budget) or
  invalid for a line that could not be run.

\b
Examples:
  isoagent batch tasks.jsonl -j 8 -o results.jsonl
  cat tasks.jsonl | isoagent batch - -j 8 | jq -r .summary

{EXIT_CODES_HELP}"""


@click.command(epilog=EPILOG, cls=GroupedHelp)
@click.argument("source_name", metavar="FILE")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    help=f"Tasks running at once [default: {DEFAULTS.max_parallel}; with --hosts, the "
    "hosts' slots].",
)
@click.option(
    "-o",
    "--output",
    "output_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the result lines to this file instead of stdout. Tasks whose id already "
    "has an ok line there, signed by isoagent, are skipped, so re-running the batch resumes "
    "it (also where the file was copied or moved).",
)
@click.option(
    "--adopt",
    is_flag=True,
    help="Trust the ok lines in --output that isoagent did not sign (a file from another "
    "user or machine, or an older isoagent): their tasks are not run again.",
)
@click.option(
    "--agent", "-a", "agent_name", default="general-purpose", show_default=True,
    help="Agent type for lines that name none (see `isoagent agents`).",
)  # fmt: skip
@click.option(
    "--api-batches",
    is_flag=True,
    help="Send the tasks' model calls as Anthropic Message Batches (one batch for the calls "
    "of the tasks running at once): half the price, but each model turn takes as long as a "
    "batch (minutes, up to 24 h: raise --timeout). With -o, a batch run again collects the "
    "turns already sent instead of paying for them twice.",
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
@functools.partial(settings_options, model_for=AGENT_MODEL)
def batch(
    source_name: str,
    jobs: int | None,
    output_path: Path | None,
    adopt: bool,
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
    settings = dataclasses.replace(settings, batch_input=source_name)
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
    previous = Previous()
    if output_path is not None:
        results, previous = open_output(settings, output_path, adopt=adopt)
        settings = dataclasses.replace(settings, budget_spent=previous.spent)
        # a writing child must not truncate or unlink it under the parent's open file
        settings = dataclasses.replace(settings, kept_files=(output_path.resolve(),))
        if api_batches:  # a rerun answers the turns already sent from their batches
            journal = batches_journal(settings.runs_dir, output_path)
            settings = dataclasses.replace(settings, batch_journal=journal)
    tasks = [t for t in items if isinstance(t, BatchTask)]
    pending, done = previous.sort(tasks)
    invalid = [r for r in items if isinstance(r, TaskRecord)]
    if done:
        count = plural(len(done), "task")
        click.echo(f"isoagent: skipping {count} already done in {output_path}", err=True)
    changed = previous.changed(tasks, output_path) if output_path is not None else []
    if not pending and not invalid and not changed:  # nothing to run: no session, no run
        if results is not None:
            results.close()
        click.echo("isoagent: batch: nothing left to run", err=True)
        return
    stdout = JsonLines()
    live = sys.stderr.isatty()
    runner = BatchRun(
        pending, invalid, previous.reported, results, stdout, live=live, changed=changed
    )
    # on a terminal the bar replaces the per-child lines; -v's tool calls are written above it
    verbose = live and settings.verbose
    progress = ProgressDisplay(verbose=settings.verbose, live=False, closing=False)
    sinks = [progress] if not live or verbose else []

    async def main() -> int:
        from isoagent.parent.session import Session

        async with Session.open(settings, sinks=sinks) as session:
            if output_path is None:
                end_when_reader_goes(session, stdout)
            return exit_code(await runner.run(session))

    try:
        run_command(main)
    finally:
        if results is not None:
            results.close()


def open_output(
    settings: Settings, path: Path, *, adopt: bool = False
) -> tuple[ResultFile, Previous]:
    """``-o``, held, and what an earlier batch left in it; a file that cannot be is one line."""
    try:
        reach = (settings.workdir, *settings.add_dirs)
        results = ResultFile(settings.runs_dir, path, reach, adopt=adopt)
        try:
            previous = results.previous()
        except BaseException:
            results.close()
            raise
    except OSError as exc:
        fail(f"cannot write {exc.filename}: {exc.strerror or exc}")
    except BatchRefused as exc:
        fail(str(exc), ExitCode.USAGE if exc.usage else ExitCode.ERROR)
    if forged := previous.forged:
        click.echo(
            f"isoagent: warning: {plural(forged, 'ok line')} in {path} "
            "not signed by isoagent batch (changed, added by another process, from another "
            "user, or older): their tasks run again (--adopt trusts them)",
            err=True,
        )
    return results, previous


def exit_code(outcome: Outcome) -> ExitCode:
    if outcome.over_budget:
        return ExitCode.BUDGET
    if outcome.stopped or outcome.unwritten:
        return ExitCode.ERROR
    return ExitCode.TASKS_FAILED if outcome.failed else ExitCode.OK


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


hide(batch, "max_parallel")  # -j's older spelling
