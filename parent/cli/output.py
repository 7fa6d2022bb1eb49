"""What ``run`` and ``task`` print on stdout: ``--output-format text|json|stream-json``.

- ``text``: the final answer (the summary) only, and only when the run ended ok.
- ``json``: one object at the end: Claude Code's ``result`` object (``claude -p
  --output-format json``), plus isoagent's status, run folder and one record per child.
- ``stream-json``: Claude Code's stream (``claude -p --output-format stream-json
  --verbose``), one JSON line per message while it happens, ending with that ``result``;
  see ``claude_format.py``. The transcripts keep isoagent's own event shapes.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import signal
import stat
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, BinaryIO

import click
import msgspec

from isoagent.parent.cli.claude_format import ClaudeFormat
from isoagent.parent.cli.errors import OUTPUT_ERRNOS, silence
from isoagent.parent.cli.exit_codes import ExitCode, exit_code_for
from isoagent.parent.records.events import RunFinished
from isoagent.parent.records.live_region import paused
from isoagent.parent.records.terminal_text import for_stdout, terminal_line

if TYPE_CHECKING:
    from isoagent.parent.model.gateway import Gateway
    from isoagent.parent.records.events import Sink
    from isoagent.parent.session import Session


class JsonLines:
    """Writes objects (msgspec Structs, dicts) as JSON lines, each flushed as soon as written.

    When the reader goes away (``| head -1``) the lines stop quietly and ``on_gone`` is called
    (``end_when_reader_goes`` ends the session then). Any other failure (a full disk) is
    raised, and stdout, if that is the stream, goes to /dev/null: nothing is written after.
    """

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout.buffer
        self.on_gone: Callable[[], None] | None = None
        self.gone = False  # its reader went away
        self._encoder = msgspec.json.Encoder()

    def __call__(self, item: object) -> None:
        if self.gone:
            return
        try:
            with paused(self.stream):  # a live block on the same terminal is taken away
                self.stream.write(self._encoder.encode(item) + b"\n")
                self.stream.flush()
        except BrokenPipeError:
            self.reader_gone()
        except OSError:
            self.gone = True
            if self.stream is sys.stdout.buffer:
                silence(sys.stdout)
            raise

    def reader_gone(self) -> None:
        """Write no more (stdout, if that is the stream, goes to /dev/null); tell ``on_gone``."""
        self.gone = True
        if self.stream is sys.stdout.buffer:
            silence(sys.stdout)
        if self.on_gone is not None:
            self.on_gone()


def end_when_reader_goes(session: Session, lines: JsonLines) -> None:
    """Once stdout's reader has gone (``| head -1`` has its line), end ``session`` as SIGPIPE
    would have: every child ended, exit 141, quietly. When stdout is a pipe that is at once,
    not when the next line fails to be written, which may be long after (a slow model turn).
    """
    lines.on_gone = functools.partial(session.stop, signal.SIGPIPE)
    if lines.gone:  # already: its first line (the session's start) could not be written
        lines.on_gone()
        return
    try:  # the writing end of a pipe polls readable only as an error: its reader is gone
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY:
            return  # a fifo opened for reading too would poll readable with our own lines
    except (OSError, ValueError):  # no descriptor (CliRunner's stdout), or a closed one
        return
    loop = asyncio.get_running_loop()

    def gone() -> None:
        loop.remove_reader(fd)
        lines.reader_gone()

    loop.add_reader(fd, gone)


class Output:
    def __init__(
        self,
        output_format: str,
        *,
        main_child: bool = False,
        tools: Sequence[str] | None = None,
        permission_mode: str = "default",
        partial: bool = False,
    ) -> None:
        """``main_child``: the run has no parent agent (``isoagent task``); ``tools`` and
        ``permission_mode``: the main agent's, for ``init``; ``partial``: stream-json prints
        every event of every model call too (``--include-partial-messages``)."""
        self.format = output_format
        self.partial = partial
        self.lines = JsonLines()
        self.claude = ClaudeFormat(
            self.lines if self.streams else None,
            main_child=main_child,
            tools=tools,
            permission_mode=permission_mode,
        )

    @property
    def streams(self) -> bool:
        """stream-json: stdout is a stream of every event."""
        return self.format == "stream-json"

    def hear(self, gateway: Gateway) -> None:
        """With ``partial``, every streamed event of ``gateway``'s calls is printed."""
        if self.partial:
            gateway.listen(self.claude.stream_event, children=True)

    def sinks(self) -> list[Sink]:
        """json and stream-json follow every event (stream-json prints them)."""
        return [self.claude] if self.format != "text" else []

    def finish(self, final: RunFinished, session: Session | None = None) -> ExitCode:
        """Print the end of the run (stream-json has already written its ``result`` line;
        text, the answer of a run that ended ok), say on stderr why it failed if it did, and
        return the exit code. An answer that cannot be written fails the command, and
        ``session``'s record says so."""
        try:
            return self._finish(final)
        except OSError as exc:
            if session is not None and exc.errno in OUTPUT_ERRNOS:
                session.failed_after(final, f"cannot write to stdout: {exc.strerror}")
            raise

    def _finish(self, final: RunFinished) -> ExitCode:
        result = final.result
        if self.format == "json":
            self.lines(self.claude.result(final))
        elif self.format == "text" and result.summary and result.status == "ok":
            # a script reads stdout as the answer: a failed run's text (what the parent said
            # before its budget ran out) is in its transcript, not there
            # color=True: click would strip CSI sequences from a pipe's payload otherwise
            click.echo(for_stdout(result.summary), color=True)
        if result.status != "ok":
            click.echo(f"isoagent: {result.status}: {terminal_line(result.error)}", err=True)
        return exit_code_for(result.status)
