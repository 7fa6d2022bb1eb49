"""``isoagent run``: the parent agent, delegating to child processes with ``task``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from parent.cli_support import agent_options, build_settings, read_prompt, run_session
from parent.exit_codes import EXIT_CODES_HELP, exit_code_for

if TYPE_CHECKING:
    from parent.session import Session


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("prompt")
@agent_options
def run(prompt: str, **options: Any) -> None:
    """Run the parent agent on PROMPT ('-' reads it from stdin); the answer goes to stdout.

    The parent can delegate to subagents with its `task` tool; each runs as its own
    process and only its summary comes back. Progress goes to stderr.
    """
    prompt = read_prompt(prompt)

    async def body(session: Session) -> int:
        result = await session.run_parent(prompt)
        session.finish(result)
        if result.summary:
            click.echo(result.summary)
        if result.status != "ok":
            click.echo(f"isoagent: {result.status}: {result.error}", err=True)
        return exit_code_for(result.status)

    sys.exit(run_session(options, build_settings(options), body))
