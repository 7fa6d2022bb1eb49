"""How a command fails: one ``isoagent: ...`` line on stderr and a non-zero exit."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import warnings
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, NoReturn, TypeGuard

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


# what a write to a stream that is gone, full or broken fails with
OUTPUT_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF}
_stderr_lost: list[OSError] = []  # stderr failed while the command went on (its progress)


def stderr_lost(error: OSError) -> None:
    """stderr failed and the command goes on without it; unless its reader just went away
    (EPIPE: the run's own exit code stays), the command ends non-zero."""
    silence(sys.stderr)
    if error.errno != errno.EPIPE:
        _stderr_lost.append(error)


@contextlib.contextmanager
def output_errors() -> Iterator[None]:
    """Every command runs in this: a write to stdout or stderr that fails ends it.

    Its reader gone (``| head -1``, EPIPE) is a quiet exit 141, as other tools end; any
    other failure (a full disk, EIO, a descriptor not open for writing) is one line on
    stderr and exit 1, or exit 1 alone when stderr is what fails. The end of a command that
    lost stderr on the way (``stderr_lost``) is not 0. What stdout holds is flushed here, so
    that its failure is not the interpreter's at exit.
    """
    _stderr_lost.clear()  # of an earlier command run in this process (a test's)
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
    except BaseException as exc:
        error = output_error(exc)
        if error is None:
            if isinstance(exc, SystemExit) and _stderr_lost and not exc.code:
                raise SystemExit(ExitCode.ERROR) from None
            raise
        silence(sys.stdout)
        if error.errno == errno.EPIPE:
            raise SystemExit(ExitCode.READER_GONE) from None
        try:
            click.echo(f"isoagent: cannot write to stdout: {error.strerror}", err=True)
        except OSError:
            silence(sys.stderr)
        raise SystemExit(ExitCode.ERROR) from None
    if _stderr_lost:
        raise SystemExit(ExitCode.ERROR)


class OutputErrorsCommand(click.Command):
    """A command whose parsing (``--help``) and body run in ``output_errors``: inside
    click's ``main``, which would make a reader gone exit 1."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with output_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with output_errors():
            return super().invoke(ctx)


def output_error(exc: BaseException) -> OSError | None:
    """The failed write to a stream that ``exc`` is, or all of whose parts are (a group)."""
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(_failed_write)
        return None if rest is not None or matched is None else output_error(matched.exceptions[0])
    return exc if _failed_write(exc) else None


def _failed_write(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError) and exc.errno in OUTPUT_ERRNOS and exc.filename is None


def silence(stream: Any) -> None:
    """Point ``stream`` (stdout, stderr) at /dev/null once writing to it failed, so that
    nothing written later (nor the flush at exit) fails again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
