"""``isoagent run``: the parent agent, delegating to child processes with ``Agent``."""

from __future__ import annotations

import click

from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import run_command
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP
from isoagent.parent.cli.help import GroupedHelp
from isoagent.parent.cli.options import output_options, settings_options
from isoagent.parent.cli.output import Output, end_when_reader_goes
from isoagent.parent.cli.prompts import task_prompt
from isoagent.parent.records.events import Sink
from isoagent.parent.settings import Settings


@click.command(epilog=EXIT_CODES_HELP, cls=GroupedHelp)
@click.argument("prompt")
@settings_options
@output_options
def run(
    prompt: str, output_format: str, include_partial_messages: bool, settings: Settings
) -> None:
    """Run the parent agent on PROMPT ('-' reads it from stdin); the answer goes to stdout.

    Text piped to stdin is attached to PROMPT between <stdin> and </stdin> lines.

    The parent can delegate to subagents with its `Agent` tool; each runs as its own
    process and only its summary comes back. Progress goes to stderr.
    """
    from isoagent.parent.session import Session

    prompt = task_prompt(prompt)
    output = Output(output_format, partial=include_partial_messages)
    progress = ProgressDisplay(verbose=settings.verbose)
    sinks: list[Sink] = [*output.sinks(), progress]

    async def main() -> int:
        async with Session.open(settings, sinks=sinks) as session:
            progress.follow(session)
            end_when_reader_goes(session, output.lines)
            output.hear(session.gateway)
            result = await session.run_parent(prompt)
            return output.finish(session.finish(result), session)

    run_command(main)
