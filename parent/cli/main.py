"""The ``isoagent`` command group."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from isoagent.parent.cli.agents import agents
from isoagent.parent.cli.batch import batch
from isoagent.parent.cli.demo import demo
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.output import silence
from isoagent.parent.cli.run import run
from isoagent.parent.cli.task import task


@contextmanager
def _reader_gone_quietly() -> Iterator[None]:
    """A reader that went away (``| head``) ends the command quietly with exit 141, as it
    does other tools, where click would exit 1."""
    try:
        yield
    except BrokenPipeError:
        silence(sys.stdout)
        sys.exit(ExitCode.READER_GONE)


class _Group(click.Group):
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _reader_gone_quietly():  # --help
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _reader_gone_quietly():
            return super().invoke(ctx)


@click.group(cls=_Group, epilog=EXIT_CODES_HELP)
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
    fill_closed_streams()
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


def fill_closed_streams() -> None:
    """Put /dev/null where the shell closed stdin, stdout or stderr (``<&-``), so that no
    file or pipe opened later lands on fd 0-2, where children would inherit it.

    ``sys.stdin`` stays None: commands read that as "no stdin".
    """
    fd = os.open(os.devnull, os.O_RDWR)
    while fd <= 2:  # open() takes the lowest free fd: each closed one in turn
        os.set_inheritable(fd, True)
        fd = os.open(os.devnull, os.O_RDWR)
    os.close(fd)
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- for the whole process
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
