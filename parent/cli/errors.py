"""How a command fails: one ``isoagent: ...`` line on stderr and a non-zero exit."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

import click

from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.records.terminal_text import terminal_line


def fail(message: str, code: int = ExitCode.ERROR) -> NoReturn:
    """One clear line on stderr (what it quotes escaped) and a non-zero exit."""
    click.echo(f"isoagent: {terminal_line(message)}", err=True)
    sys.exit(code)


def run_command(main: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run a command's session body and exit with its status."""
    sys.exit(run_session_body(main))


def run_session_body(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` and return its exit status; a session that cannot start or is ended by a
    signal is one line on stderr and its own exit status."""
    import asyncio  # here: commands that run no session (agents, logs) need not import it

    from isoagent.parent.session import Interrupted, SessionError

    try:
        return asyncio.run(main())
    except SessionError as exc:
        click.echo(f"isoagent: {terminal_line(str(exc))}", err=True)
        return ExitCode.ERROR
    except Interrupted as exc:
        if not exc.quiet:
            click.echo(f"isoagent: {exc}", err=True)
        # a model call cancelled while connecting can leave one of the HTTP library's
        # coroutines unstarted; its warning at exit would be the interruption's only noise
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        return exc.exit_code
