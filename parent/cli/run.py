"""``isoagent run``: the parent agent, delegating to child processes with ``task``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP
from isoagent.parent.cli.options import (
    agent_options,
    build_settings,
    output_options,
    read_prompt,
    run_session,
)
from isoagent.parent.cli.output import Output

if TYPE_CHECKING:
    from isoagent.parent.session import Session


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("prompt")
@agent_options
@output_options
def run(prompt: str, output_format: str, **options: Any) -> None:
    """Run the parent agent on PROMPT ('-' reads it from stdin); the answer goes to stdout.

    The parent can delegate to subagents with its `task` tool; each runs as its own
    process and only its summary comes back. Progress goes to stderr.
    """
    prompt = read_prompt(prompt)
    output = Output(output_format)

    async def body(session: Session) -> int:
        result = await session.run_parent(prompt)
        return output.finish(session.finish(result))

    sys.exit(run_session(options, build_settings(options), body, sinks=output.sinks()))
