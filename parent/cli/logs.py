"""``isoagent logs [RUN]``: past runs, and one run's tree of agents, turns and tool calls.

Read from the transcripts in ``<workdir>/.isoagent/runs/``: ``run.jsonl`` (the run and
the parent's conversation) and one ``child-*.jsonl`` per child.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import msgspec

from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.cli.options import workdir_option
from isoagent.parent.records.events import (
    AnyEvent,
    ChildFinished,
    ChildStarted,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from isoagent.parent.records.terminal_text import for_stdout
from isoagent.protocol import Result, TextBlock, ToolResultBlock, ToolUseBlock

_decode = msgspec.json.Decoder(AnyEvent).decode
RUNS = Path(".isoagent") / "runs"


@click.command(
    short_help="List the latest runs, or show RUN as a tree of its agents, turns and tool calls."
)
@click.argument("run_id", metavar="[RUN]", required=False)
@workdir_option("Workspace whose runs to read (default: the current directory).")
@click.option("-n", "--count", type=click.IntRange(1), default=20, show_default=True,
              help="How many of the latest runs to list.")  # fmt: skip
def logs(run_id: str | None, workdir: Path, count: int) -> None:
    """List the latest runs, or show RUN (an id, a unique prefix of one, or 'last') as a
    tree of its agents, their turns and tool calls."""
    runs_dir = workdir / RUNS
    runs = sorted(_runs(runs_dir), key=_started)
    if run_id is None:
        for path in runs[-count:][::-1]:  # a prompt in each, escaped on a terminal
            click.echo(for_stdout(_run_line(path), lines=False))
        if not runs:
            click.echo(f"isoagent: no runs in {runs_dir}", err=True)
        return
    matches = runs[-1:] if run_id == "last" else [p for p in runs if p.name.startswith(run_id)]
    if len(matches) != 1:
        why = "no run" if not matches else f"{len(matches)} runs"
        click.echo(f"isoagent: {why} matching {run_id!r} in {runs_dir}", err=True)
        sys.exit(ExitCode.USAGE)
    for line in run_tree(matches[0]):  # a model's and its tools' words, escaped on a terminal
        click.echo(for_stdout(line, lines=False))


def _runs(runs_dir: Path) -> list[Path]:
    return [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []


def _started(run: Path) -> tuple[str, float]:
    """Run ids begin with their start to the second; within a second, the last written."""
    try:
        return run.name[:15], (run / "run.jsonl").stat().st_mtime
    except OSError:
        return run.name[:15], 0.0


def read_events(path: Path) -> list[AnyEvent]:
    """The events of one transcript; a line that does not decode is skipped."""
    events = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            events.append(_decode(line))
        except msgspec.DecodeError:
            continue
    return events


def _run_line(path: Path) -> str:
    events = read_events(path / "run.jsonl")
    final = next((e for e in events if isinstance(e, RunFinished)), None)
    prompt = next(
        (_text(e) for e in events if isinstance(e, MessageAdded) and e.role == "user"),
        next((e.prompt for e in events if isinstance(e, ChildStarted)), ""),
    )
    children = sum(isinstance(e, ChildStarted) for e in events)
    status = _facts(final.result) if final else "unfinished"
    return f"{path.name}  {status}, {children} child(ren)  {_short(prompt, 60)}"


def run_tree(path: Path) -> Iterator[str]:
    """One run as indented lines: the run, the parent's turns, each child under the
    ``task`` call that started it, with its own turns."""
    events = read_events(path / "run.jsonl")
    start = next((e for e in events if isinstance(e, RunStarted)), None)
    final = next((e for e in events if isinstance(e, RunFinished)), None)
    yield f"run {path.name}: {_facts(final.result) if final else 'unfinished'}"
    if start is not None:
        yield f"  model {start.model}, workdir {start.workdir}"
    children = {e.child: e for e in events if isinstance(e, ChildStarted | ChildFinished)}
    transcripts = {
        e.child: path / Path(e.transcript).name
        for e in events
        if isinstance(e, ChildStarted | ChildFinished)
    }
    shown: set[str] = set()
    for event in events:
        if isinstance(event, MessageAdded) and not event.child:
            yield from _message_lines(event, "  ")
        elif isinstance(event, ChildFinished | ChildStarted) and event.child not in shown:
            shown.add(event.child)
            yield from _child_lines(children[event.child], transcripts[event.child], "    ")


def _child_lines(
    event: ChildStarted | ChildFinished, transcript: Path, indent: str
) -> Iterator[str]:
    child_events = read_events(transcript)
    final = next((e for e in child_events if isinstance(e, ChildFinished)), None)
    result = final.result if final else event.result if isinstance(event, ChildFinished) else None
    facts = _facts(result) if result else "unfinished"
    yield f"{indent}child {event.child} {event.agent} {event.description!r}: {facts}"
    for child_event in child_events:
        if isinstance(child_event, MessageAdded):
            yield from _message_lines(child_event, indent + "  ")
    if result and result.error:
        yield f"{indent}  error: {_short(result.error, 100)}"


def _message_lines(event: MessageAdded, indent: str) -> Iterator[str]:
    if event.role == "user":
        for block in event.content:
            if isinstance(block, ToolResultBlock) and block.is_error:
                yield f"{indent}  ! {_short(block.content, 90)}"
            elif isinstance(block, TextBlock) and event.turn == 0:
                yield f"{indent}prompt: {_short(block.text, 90)}"
        return
    tokens = f" ({event.usage.total} tokens)" if event.usage else ""
    yield f"{indent}turn {event.turn + 1}{tokens}"
    for block in event.content:
        if isinstance(block, TextBlock) and block.text.strip():
            yield f"{indent}  {_short(block.text, 90)}"
        elif isinstance(block, ToolUseBlock):
            args = json.dumps(block.input, ensure_ascii=False)
            yield f"{indent}  {block.name} {_short(args, 80)}"


def _facts(result: Result) -> str:
    return (
        f"{result.status}, {result.turns} turns, {result.tool_calls} tool calls, "
        f"{result.usage.total} tokens, {result.duration:.1f} s"
    )


def _text(event: MessageAdded) -> str:
    return " ".join(b.text for b in event.content if isinstance(b, TextBlock))


def _short(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."
