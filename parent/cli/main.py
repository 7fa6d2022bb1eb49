"""The ``isoagent`` command group.

Each command's module is imported only when that command runs (or shows its own help):
``isoagent --help`` imports click and this module, not asyncio, the SDK or the other
commands.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from isoagent.parent.cli.errors import OutputErrorsCommand
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.help import HELP_NAMES

# name: (module defining the command function of that name, its short help for the list)
COMMANDS = {
    "run": (
        "isoagent.parent.cli.run",
        "Run the parent agent on PROMPT ('-' reads it from stdin); the answer goes to stdout.",
    ),
    "task": (
        "isoagent.parent.cli.task",
        "Run one subagent on PROMPT in its own process and print its summary.",
    ),
    "batch": (
        "isoagent.parent.cli.batch",
        "Run one subagent per line of FILE ('-' for stdin), each in its own process.",
    ),
    "agents": (
        "isoagent.parent.cli.agents",
        "List the agent types: built-ins, ~/.claude/agents/, --agents-dir, .claude/agents/.",
    ),
    "logs": (
        "isoagent.parent.cli.logs",
        "List the latest runs, or show RUN as a tree of its agents, turns and tool calls.",
    ),
    "trust": (
        "isoagent.parent.cli.trust",
        "Trust a workspace's .mcp.json, settings and agent files' servers as they are now.",
    ),
    "gateway": (
        "isoagent.parent.cli.gateway",
        "List this user's warm gateways (server, age, memory, calls), or stop them.",
    ),
    "demo": (
        "isoagent.parent.cli.demo",
        "Run three subagent examples offline: scripted model turns, real child processes.",
    ),
}


class _Group(OutputErrorsCommand, click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        command: click.Command = getattr(importlib.import_module(COMMANDS[name][0]), name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown command is an error that names the closest one (``runn``: ``run``)."""
        name = args[0]
        if name not in COMMANDS and not name.startswith("-"):
            import difflib  # here: --help need not import it

            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.7)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, from ``COMMANDS``: importing each to ask would cost more
        than the rest of ``--help``."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [
            (name, click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit))
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args: Sequence[str] | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """``isoagent -p ...`` is Claude Code's print mode (``print_mode.py``); click's errors
        are one line. Here rather than in ``main()``, so that CliRunner sees what a shell sees."""
        args = list(sys.argv[1:] if args is None else args)
        command: click.Command = self
        if _print_mode(args):
            from isoagent.parent.cli.print_mode import print_mode

            command = print_mode
        kwargs["standalone_mode"] = False
        kwargs.setdefault("help_option_names", HELP_NAMES["help_option_names"])  # -p's too
        with one_line_errors():
            return click.Command.main(command, args, **kwargs)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """click's usage errors become one ``isoagent: ...`` line, exit 2."""
    try:
        yield
    except click.ClickException as exc:
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"isoagent: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("isoagent: aborted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    finally:  # on the way out, a late Ctrl-C must not turn the exit into a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@click.group(
    cls=_Group, epilog=EXIT_CODES_HELP, invoke_without_command=True, context_settings=HELP_NAMES
)
@click.version_option(package_name="isoagent")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run Claude subagents as separate OS processes.

    `isoagent -p PROMPT` is `claude -p`, with Claude Code's flags (see `isoagent -p --help`).
    """
    if ctx.invoked_subcommand is None:  # a bare `isoagent`: its help, not an error
        click.echo(ctx.get_help(), color=ctx.color)


def main() -> None:
    """The ``isoagent`` program."""
    fill_closed_streams()
    cli.main(prog_name="isoagent")


def _print_mode(args: list[str]) -> bool:
    """``-p``/``--print`` (or the SDK's ``--input-format``) before any command name."""
    if not args or args[0] in COMMANDS:
        return False
    options = args[: args.index("--")] if "--" in args else args
    return any(a in ("-p", "--print") or a.split("=")[0] == "--input-format" for a in options)


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
