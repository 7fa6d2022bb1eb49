"""``isoagent logs [RUN]``: past runs, and one run's tree of agents, turns and tool calls.

Read from the transcripts in the run folders (``<workdir>/.isoagent/runs/``, ``--run-dir``:
``records/run_folder.runs_dir_for``; ``records/past_run.py``). The
totals of a run are its transcripts' own, every child's included; ``--json`` prints the same
figures, and with RUN each agent's events as its transcript holds them; ``--html`` draws
RUN as a timeline (``records/timeline.py``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import click
import msgspec

from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.cli.options import run_dir_option, workdir_option
from isoagent.parent.records.events import AnyEvent, ChildFinished, ChildStarted, MessageAdded
from isoagent.parent.records.figures import duration, plural, tokens, usd
from isoagent.parent.records.past_run import AgentLog, PastRun
from isoagent.parent.records.run_folder import runs_dir_for
from isoagent.parent.records.run_seal import is_sealed
from isoagent.parent.records.terminal_text import for_stdout, shorten, warn
from isoagent.protocol import TextBlock, ToolResultBlock, ToolUseBlock, Usage

SHORT = 90  # characters of a text, a tool's input or output shown without --full


class AgentRecord(msgspec.Struct, omit_defaults=True):
    """One agent of a run in ``--json``: the parent (``child`` "") or a child."""

    child: str
    agent: str
    model: str
    status: str
    turns: int
    tool_calls: int
    tokens: int
    usage: Usage
    cost_usd: float
    seconds: float | None = None
    retries: int = 0
    error: str = ""
    events: list[AnyEvent] = []  # its transcript's


class RunRecord(msgspec.Struct, omit_defaults=True):
    """One run in ``--json``: what ``isoagent logs`` lists; with RUN, its agents too."""

    run_id: str
    label: str  # its prompt, or "batch FILE"
    status: str
    turns: int
    tool_calls: int
    tokens: int  # every agent's, as their transcripts count them
    usage: Usage
    cost_usd: float
    children: int
    failed_children: int
    started: datetime | None = None
    seconds: float | None = None
    batch_input: str = ""
    error: str = ""
    agents: list[AgentRecord] = []


@click.command(
    short_help="List the latest runs, or show RUN as a tree of its agents, turns and tool calls."
)
@click.argument("run_id", metavar="[RUN]", required=False)
@workdir_option("Workspace whose runs to read (default: the current directory).")
@run_dir_option()
@click.option(
    "-n",
    "--count",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="How many of the latest runs to list.",
)
@click.option(
    "--full", is_flag=True, help="Show texts and tool inputs whole, and every tool's output."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON: the runs, or RUN with each agent's transcript events.",
)
@click.option("--html", is_flag=True, help="Write RUN's timeline as one self-contained HTML page.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where --html writes its page (default: stdout); only with --html.")  # fmt: skip
def logs(
    run_id: str | None,
    workdir: Path,
    run_dir: str | None,
    count: int,
    full: bool,
    as_json: bool,
    html: bool,
    output: Path | None,
) -> None:
    """List the latest runs, or show RUN (an id, a unique prefix of one, or 'last') as a
    tree of its agents, their turns and tool calls. Tokens and cost include every child."""
    if html and (run_id is None or as_json):
        fail("--html draws one RUN, as a page: give RUN, without --json", ExitCode.USAGE)
    if output is not None and not html:
        fail("-o is where --html writes its page: add --html (or redirect stdout)", ExitCode.USAGE)
    runs_dir, _ = runs_dir_for(workdir, run_dir)
    runs = sorted(_runs(runs_dir), key=_started)
    if run_id is None:
        latest = [PastRun.read(path) for path in runs[-count:][::-1]]
        if as_json:
            click.echo(_json([record(run) for run in latest]))
        for run in [] if as_json else latest:  # a prompt in each, escaped on a terminal
            click.echo(for_stdout(run_line(run), lines=False))
        if not runs:
            click.echo(f"isoagent: no runs in {runs_dir}", err=True)
        return
    if run_id == "last":
        matches = _last_written_here(runs, runs_dir)
    else:
        matches = [p for p in runs if p.name.startswith(run_id)]
    if len(matches) != 1:
        why = "no run" if not matches else f"{len(matches)} runs"
        fail(f"{why} matching {run_id!r} in {runs_dir}", ExitCode.USAGE)
    run = PastRun.read(matches[0])
    if html:
        _write_page(run, output)
    elif as_json:
        click.echo(_json(record(run, events=True)))
    else:
        for line in run_tree(run, full=full):  # a model's and its tools' words, escaped
            click.echo(for_stdout(line, lines=False))


def _last_written_here(runs: list[Path], runs_dir: Path) -> list[Path]:
    """The newest of ``runs`` this user's isoagent wrote (``run_seal``), as a list of one
    (or none); newer run folders it did not write are named on stderr, in one line."""
    passed = []
    for path in reversed(runs):
        if is_sealed(path):
            break
        passed.append(path.name)
    else:
        path = None
    if passed:
        warn(
            f"passed over {plural(len(passed), 'run folder')} in {runs_dir} not written by "
            f"this user's isoagent: {shorten(', '.join(passed), SHORT)}"
        )
    return [] if path is None else [path]


def _runs(runs_dir: Path) -> list[Path]:
    return [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []


def _started(run: Path) -> tuple[str, float]:
    """Run ids begin with their start to the second; within a second, the last written."""
    try:
        return run.name[:15], (run / "run.jsonl").stat().st_mtime
    except OSError:
        return run.name[:15], 0.0


def _write_page(run: PastRun, output: Path | None) -> None:
    from isoagent.parent.records.timeline import NoTimes, timeline_page

    if output is None and sys.stdout.isatty():
        fail("--html writes a page: give -o FILE, or redirect stdout", ExitCode.USAGE)
    try:
        page = timeline_page(run)
    except NoTimes as exc:
        fail(str(exc))
    if output is None:
        sys.stdout.write(page)
        return
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


def _json(value: object) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def record(run: PastRun, *, events: bool = False) -> RunRecord:
    """``run`` in ``--json``'s shape; ``events``: each agent with its transcript's events."""
    final = run.final
    start = run.start
    return RunRecord(
        run_id=run.run_id,
        label=run.label,
        status=run.status,
        turns=run.turns,
        tool_calls=run.tool_calls,
        tokens=run.usage.total,
        usage=run.usage,
        cost_usd=round(run.cost, 6),
        children=len(run.children),
        failed_children=len(run.failed),
        started=run.started_at,
        seconds=run.seconds,
        batch_input=start.batch_input if start else "",
        error=final.result.error if final else "",
        agents=[_agent_record(run, agent) for agent in run.agents] if events else [],
    )


def _agent_record(run: PastRun, agent: AgentLog) -> AgentRecord:
    result = agent.result if agent.child else (run.final.result if run.final else None)
    if agent.child:
        retries = agent.finished.retries if agent.finished else 0
    else:  # the run's retries are every agent's: the parent's are the rest
        retries = (run.final.retries if run.final else 0) - sum(
            c.finished.retries for c in run.children if c.finished
        )
    return AgentRecord(
        child=agent.child,
        agent=agent.agent,
        model=agent.model,
        status=result.status if result else "unfinished",
        turns=agent.turns,
        tool_calls=agent.tool_calls,
        tokens=agent.usage.total,
        usage=agent.usage,
        cost_usd=round(agent.cost, 6),
        seconds=result.duration if result else None,
        retries=max(retries, 0),
        error=result.error if result else "",
        events=agent.events,
    )


def run_line(run: PastRun) -> str:
    """One line of the list: id, totals, children, what was asked."""
    children = plural(len(run.children), "child", "children")
    if run.failed:
        children += f" ({_failures(run.failed)})"
    return f"{run.run_id}  {run.status}, {totals(run)}, {children}  {shorten(run.label, 60)}"


def _failures(failed: list[AgentLog]) -> str:
    """``1 timeout, 2 crashed``: how many children ended each way that is not ok."""
    counts: dict[str, int] = {}
    for child in failed:
        counts[child.status] = counts.get(child.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def totals(run: PastRun) -> str:
    """``5 turns, 4 tool calls, 3,412 tokens, $0.0127, 5.1s``: every agent's, as the run's
    closing line counts them."""
    seconds = f", {duration(run.seconds)}" if run.seconds is not None else ""
    return (
        f"{plural(run.turns, 'turn')}, {plural(run.tool_calls, 'tool call')}, "
        f"{tokens(run.usage.total)}, {usd(run.cost)}{seconds}"
    )


def run_tree(run: PastRun, *, full: bool = False) -> Iterator[str]:
    """One run as indented lines: the run, the parent's turns, each child under the
    ``Agent`` call that started it, with its own turns, and its own children under it;
    ``full``: nothing cut short."""
    yield f"run {run.run_id}: {run.status}, {totals(run)}"
    if (final := run.final) is not None and final.result.error:
        yield f"  {final.result.status}: {shorten(final.result.error, SHORT)}"
    if (start := run.start) is not None:
        batch = f", batch {start.batch_input}" if start.batch_input else ""
        yield f"  model {start.model}, workdir {start.workdir}{batch}"
    if run.failed:
        yield f"  {plural(len(run.failed), 'child', 'children')} not ok: {_failures(run.failed)}"
    children = {c.child: c for c in run.children}
    shown: set[str] = set()
    for event in run.events:
        if isinstance(event, MessageAdded) and not event.child:
            yield from _message_lines(event, "  ", full)
        elif isinstance(event, ChildFinished | ChildStarted) and event.child not in shown:
            child = children[event.child]
            if not child.asked_by:  # a child's children are shown under it
                yield from _child_lines(run, child, "    ", full, shown)


def _child_lines(
    run: PastRun, child: AgentLog, indent: str, full: bool, shown: set[str]
) -> Iterator[str]:
    shown.add(child.child)
    known = child.started or child.finished
    description = known.description if known else ""
    result = child.result
    seconds = f", {duration(result.duration)}" if result else ""
    yield (
        f"{indent}child {child.child} {child.agent} {description!r}: {child.status}, "
        f"{plural(child.turns, 'turn')}, {plural(child.tool_calls, 'tool call')}, "
        f"{tokens(child.usage.total)}, {usd(child.cost)}{seconds}"
    )
    for message in child.messages:
        yield from _message_lines(message, indent + "  ", full)
    if result and result.error:
        yield from _text_lines("error: ", result.error, indent + "  ", full)
    for grandchild in run.children_of(child.child):
        if grandchild.child not in shown:
            yield from _child_lines(run, grandchild, indent + "    ", full, shown)


def _message_lines(event: MessageAdded, indent: str, full: bool) -> Iterator[str]:
    if event.role == "user":
        for block in event.content:
            if isinstance(block, ToolResultBlock) and (full or block.is_error):
                mark = "! " if block.is_error else "-> "
                yield from _text_lines(mark, block.content, indent + "  ", full)
            elif isinstance(block, TextBlock) and event.turn == 0:
                yield from _text_lines("prompt: ", block.text, indent, full)
        return
    used = f" ({tokens(event.usage.total)})" if event.usage else ""
    yield f"{indent}turn {event.turn + 1}{used}"
    for block in event.content:
        if isinstance(block, TextBlock) and block.text.strip():
            yield from _text_lines("", block.text, indent + "  ", full)
        elif isinstance(block, ToolUseBlock):
            args = json.dumps(block.input, ensure_ascii=False, indent=2 if full else None)
            yield from _text_lines(f"{block.name} ", args, indent + "  ", full)


def _text_lines(head: str, text: str, indent: str, full: bool) -> Iterator[str]:
    """``head`` and ``text`` on one line cut to ``SHORT`` characters; ``full``: every line
    of it, the later ones indented under the first."""
    if not full:
        yield f"{indent}{head}{shorten(text, SHORT)}"
        return
    first, *rest = text.rstrip("\n").split("\n")
    yield f"{indent}{head}{first}"
    for line in rest:
        yield f"{indent}{' ' * len(head)}{line}".rstrip()
