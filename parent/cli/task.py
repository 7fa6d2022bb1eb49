"""``isoagent task``: one subagent in its own process, no parent model turn."""

from __future__ import annotations

import functools

import click

from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import run_command
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP
from isoagent.parent.cli.help import GroupedHelp
from isoagent.parent.cli.options import (
    AGENT_MODEL,
    output_options,
    pick_agent,
    settings_options,
)
from isoagent.parent.cli.output import Output, end_when_reader_goes
from isoagent.parent.cli.prompts import task_prompt
from isoagent.parent.records.events import Sink
from isoagent.parent.settings import Settings

EPILOG = f"""\b
Examples:
  isoagent task --agent Explore "find where auth is handled"
  git diff | isoagent task --agent Plan "review this diff" > plan.md
  isoagent task - < prompt.txt

{EXIT_CODES_HELP}"""


@click.command(epilog=EPILOG, cls=GroupedHelp)
@click.argument("prompt")
@click.option(
    "--agent", "-a", "agent_name", default="general-purpose", show_default=True,
    help="Agent type to run (see `isoagent agents`).",
)  # fmt: skip
@functools.partial(settings_options, model_for=AGENT_MODEL)
@output_options
def task(
    prompt: str,
    agent_name: str,
    output_format: str,
    include_partial_messages: bool,
    settings: Settings,
) -> None:
    """Run one subagent on PROMPT in its own process and print its summary.

    PROMPT '-' reads the prompt from stdin. Otherwise text piped to stdin is attached
    to the prompt between <stdin> and </stdin> lines. Progress goes to stderr.
    """
    from isoagent.parent.children.child_run import ChildRequest, describe
    from isoagent.parent.session import Session

    text = task_prompt(prompt)
    agent = pick_agent(settings.agents, agent_name)
    output = Output(
        output_format, main_child=True, tools=agent.tools, partial=include_partial_messages
    )
    request = ChildRequest(describe(text), text, agent)
    progress = ProgressDisplay(verbose=settings.verbose)
    sinks: list[Sink] = [*output.sinks(), progress]

    async def main() -> int:
        async with Session.open(settings, sinks=sinks) as session:
            progress.follow(session)
            end_when_reader_goes(session, output.lines)
            output.hear(session.gateway)
            finished = await session.supervisor.run(request)
            return output.finish(session.finish(finished.result), session)

    run_command(main)
