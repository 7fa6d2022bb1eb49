"""``isoagent demo``: three subagent examples, offline, with scripted model turns.

Everything but the model is real: a temporary copy of a sample project shipped
with isoagent, the parent loop, the child processes and their tools, the
progress lines, the transcripts. The model turns are replayed from a recording
shipped next to the project (``parent/demo/cassette.jsonl``, made by
``python -m tests.support.demo_cassette``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from isoagent.child.agent.builtin_agents import TASK_TOOL
from isoagent.parent.cli.errors import fail, run_session_body
from isoagent.parent.cli.exit_codes import exit_code_for
from isoagent.parent.records.events import MessageAdded
from isoagent.parent.records.figures import plural
from isoagent.protocol import Limits, Result, ToolResultBlock, ToolUseBlock

if TYPE_CHECKING:
    from isoagent.parent.model.gateway import ModelSource
    from isoagent.parent.records.events import ChildFinished, Event, Sink

EXAMPLES = (
    "Use a subtask to find what testing framework this project uses",
    "Delegate: read all .py files and summarize what each one does",
    "Use a task to create a new module, then verify it from here",
)
DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
CASSETTE = DEMO_DIR / "cassette.jsonl"
SAMPLE_PROJECT = DEMO_DIR / "project"
SAMPLE_MTIME = 1_700_000_000  # glob lists files newest first
SCRIPTED = (
    "isoagent demo: the model turns are scripted (replayed from a recording shipped with "
    "isoagent, no API key needed); the parent loop, the child processes, their tools, the "
    "files and the transcripts are real."
)


@dataclass
class Tally:
    """An event sink: what the children read vs what reached the parent's context."""

    child_bytes: int = 0
    parent_bytes: int = 0
    _task_ids: set[str] = field(default_factory=set)

    def __call__(self, event: Event) -> None:
        if not isinstance(event, MessageAdded):
            return
        for block in event.content:
            if isinstance(block, ToolUseBlock) and block.name == TASK_TOOL and not event.child:
                self._task_ids.add(block.id)
            elif isinstance(block, ToolResultBlock):
                size = len(block.content.encode())
                if event.child:
                    self.child_bytes += size
                elif block.tool_use_id in self._task_ids:
                    self.parent_bytes += size


@dataclass
class Outcome:
    prompt: str
    result: Result
    run_dir: Path
    children: list[ChildFinished]
    tally: Tally

    def line(self, number: int) -> str:
        r = self.result
        kids = sorted(self.children, key=lambda c: c.child)  # in the order they started
        pids = ", ".join(str(c.pid) for c in kids)
        child_turns = sum(c.result.turns for c in kids)
        child_calls = sum(c.result.tool_calls for c in kids)
        return (
            f"{number}. {self.run_dir.name}: parent {plural(r.turns, 'turn')}, "
            f"{plural(r.tool_calls, 'tool call')}; {plural(len(kids), 'child', 'children')} "
            f"(pid {pids}) {plural(child_turns, 'turn')}, {plural(child_calls, 'tool call')}; "
            f"the children read {self.tally.child_bytes:,} bytes, "
            f"{self.tally.parent_bytes:,} bytes reached the parent's context"
        )


def copy_sample_project(root: Path) -> Path:
    """``root/project``, its files all dated alike: the tools' output is the same everywhere."""
    project = root / "project"
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".isoagent")
    shutil.copytree(SAMPLE_PROJECT, project, ignore=ignore)
    for path in project.rglob("*"):
        os.utime(path, (SAMPLE_MTIME, SAMPLE_MTIME))
    return project


async def run_examples(
    root: Path,
    source: ModelSource,
    display: Callable[[], Sink],
    echo: Callable[[str], None],
    outcomes: list[Outcome],
) -> None:
    """Run each example as a ``run`` in ``root/project``, adding its outcome to ``outcomes``
    as it ends (an interrupt keeps those); stop after one that fails. ``display`` makes each
    example's own progress display: its closing line counts that example alone."""
    from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
    from isoagent.parent.session import Session
    from isoagent.parent.settings import Settings

    settings = Settings(
        workdir=root / "project",
        limits=Limits(),
        run_base=root / "runs",
        agents=dict(BUILTIN_AGENTS),
        allow_unsandboxed=True,  # confined by Landlock where the kernel has it
    )
    for number, prompt in enumerate(EXAMPLES, 1):
        echo(f"\n[{number}/{len(EXAMPLES)}] {prompt}")
        tally = Tally()
        async with Session.open(settings, source=source, sinks=[display(), tally]) as session:
            result = await session.run_parent(prompt)
            finished = session.finish(result)
            outcomes.append(Outcome(prompt, result, session.run.path, finished.children, tally))
        outcome = outcomes[-1]
        if outcome.result.summary:
            echo(outcome.result.summary)
        if outcome.result.status != "ok":
            break


@click.command()
def demo() -> None:
    """Run three subagent examples offline: scripted model turns, real child processes.

    Needs no API key and no network. Works in a temporary copy of a small sample
    project; prints where it is, with the transcripts, and what each example did.
    """
    from isoagent.parent.cli.display import ProgressDisplay
    from isoagent.parent.model.cassette import CassetteError, ReplaySource

    click.echo(SCRIPTED)
    try:
        source = ReplaySource(CASSETTE, "loose")
    except CassetteError as exc:
        fail(f"the demo's recording is damaged: {exc}")
    root = Path(tempfile.mkdtemp(prefix="isoagent-demo-"))
    project = copy_sample_project(root)
    click.echo(f"Working in a temporary copy of a sample project: {project}")
    outcomes: list[Outcome] = []

    async def main() -> int:
        await run_examples(
            root, source, lambda: ProgressDisplay(verbose=True), click.echo, outcomes
        )
        return 0

    code = run_session_body(main)
    click.echo(
        f"\nTranscripts: {root / 'runs'} (a folder per example: run.jsonl is the parent's "
        "story, child-*.jsonl each child's whole conversation)"
    )
    for number, outcome in enumerate(outcomes, 1):
        click.echo(outcome.line(number))
    if code:
        sys.exit(code)
    for number, outcome in enumerate(outcomes, 1):
        r = outcome.result
        if r.status != "ok":
            fail(f"example {number} ended with {r.status}: {r.error}", exit_code_for(r.status))
