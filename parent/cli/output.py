"""What ``run`` and ``task`` print on stdout: ``--output-format text|json|stream-json``.

- ``text``: the final answer (the summary) only.
- ``json``: one object at the end, the run's ``result`` event (the result with its
  status, turns, usage and duration, and one record per child).
- ``stream-json``: every event as one JSON line while it happens, in the shapes of
  the transcripts (``parent/events.py``), ending with the same ``result`` event.
"""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING, Any, BinaryIO

import click
import msgspec

from isoagent.parent.cli.exit_codes import ExitCode, exit_code_for
from isoagent.parent.events import RunFinished

if TYPE_CHECKING:
    from isoagent.parent.events import Sink


class JsonLines:
    """Writes msgspec Structs as JSON lines, each flushed as soon as it is written.

    When the reader goes away (``| head -1``) the lines stop quietly; the run goes on.
    """

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout.buffer
        self._encoder = msgspec.json.Encoder()
        self._closed = False

    def __call__(self, item: msgspec.Struct) -> None:
        if self._closed:
            return
        try:
            self.stream.write(self._encoder.encode(item) + b"\n")
            self.stream.flush()
        except BrokenPipeError:
            self._closed = True
            if self.stream is sys.stdout.buffer:
                silence(sys.stdout)


def silence(stream: IO[Any]) -> None:
    """Point ``stream`` (stdout, stderr) at /dev/null once its reader has gone, so that
    nothing written later (nor the flush at exit) raises a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class Output:
    def __init__(self, output_format: str) -> None:
        self.format = output_format
        self.lines = JsonLines()

    def sinks(self) -> list[Sink]:
        """For stream-json: every event of the session, as it happens."""
        return [self.lines] if self.format == "stream-json" else []

    def finish(self, final: RunFinished) -> ExitCode:
        """Print the end of the run (stream-json has already written its ``result`` line),
        say on stderr why it failed if it did, and return the exit code."""
        result = final.result
        if self.format == "json":
            self.lines(final)
        elif self.format == "text" and result.summary:
            click.echo(result.summary)
        if result.status != "ok":
            click.echo(f"isoagent: {result.status}: {result.error}", err=True)
        return exit_code_for(result.status)
