"""The ``isoagent`` command group."""

from __future__ import annotations

import sys

import click

from parent.commands.agents import agents
from parent.commands.batch import batch
from parent.commands.demo import demo
from parent.commands.run import run
from parent.commands.task import task
from parent.exit_codes import EXIT_CODES_HELP, ExitCode


@click.group(epilog=EXIT_CODES_HELP)
@click.version_option(package_name="isoagent")
def cli() -> None:
    """Run Claude subagents as separate OS processes."""


cli.add_command(run)
cli.add_command(task)
cli.add_command(batch)
cli.add_command(agents)
cli.add_command(demo)


def main() -> None:
    """Run the CLI; click's usage errors become one ``isoagent: ...`` line, exit 2."""
    try:
        cli.main(prog_name="isoagent", standalone_mode=False)
    except click.ClickException as exc:
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"isoagent: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("isoagent: aborted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
