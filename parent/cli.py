"""The ``isoagent`` command group."""

from __future__ import annotations

import click

from parent.commands.run import run
from parent.exit_codes import EXIT_CODES_HELP


@click.group(epilog=EXIT_CODES_HELP)
@click.version_option(package_name="isoagent")
def cli() -> None:
    """Run Claude subagents as separate OS processes."""


cli.add_command(run)


def main() -> None:
    cli(prog_name="isoagent")
