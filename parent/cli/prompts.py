"""Reading a prompt: from the argument, from stdin (``-``), with piped stdin attached."""

from __future__ import annotations

import io
import os
import stat
import sys

from isoagent.parent.batch.input import MAX_PROMPT_BYTES
from isoagent.parent.cli.errors import fail
from isoagent.parent.cli.exit_codes import ExitCode


def read_prompt(prompt: str) -> str:
    """``-`` means stdin; an empty prompt is a usage error. Bytes that are not UTF-8
    (in the argument or on stdin) become U+FFFD."""
    if prompt == "-":
        if sys.stdin is None:
            fail("reading the prompt from stdin, but stdin is closed", ExitCode.USAGE)
        if sys.stdin.isatty():
            fail("reading the prompt from stdin, but stdin is a terminal", ExitCode.USAGE)
        prompt = read_stdin()
    prompt = prompt.encode("utf-8", "surrogateescape").decode("utf-8", errors="replace")
    if not prompt.strip():
        fail("the prompt is empty", ExitCode.USAGE)
    return prompt


def task_prompt(prompt: str) -> str:
    """The prompt, with piped stdin (if any) attached as a delimited block."""
    if prompt == "-":
        return read_prompt(prompt)
    prompt = read_prompt(prompt)
    piped = read_piped_stdin()
    if piped.strip():
        prompt = f"{prompt.rstrip()}\n\n<stdin>\n{piped.rstrip()}\n</stdin>"
    return prompt


def read_piped_stdin() -> str:
    """What a pipe or a redirected file on stdin holds; "" for a terminal, /dev/null or none
    (also a closed stdin).

    Only pipes, files and in-memory streams (click's CliRunner) are read, so a stdin nobody
    writes to (a socket, a terminal) never makes the command wait.
    """
    if sys.stdin is None:
        return ""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except io.UnsupportedOperation:  # in memory: it holds all it ever will
        mode = stat.S_IFREG
    except (OSError, ValueError):
        return ""
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return ""
    return read_stdin()


def read_stdin() -> str:
    """All of stdin as text, bytes that are not UTF-8 as U+FFFD. Binary data (a NUL byte),
    more than ``MAX_PROMPT_BYTES`` (``/dev/zero`` never ends) or a stdin that cannot be read
    (open for writing only) is a usage error."""
    assert sys.stdin is not None
    try:
        data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read stdin: {exc.strerror or exc}", ExitCode.USAGE)
    if (at := data.find(b"\0")) >= 0:
        fail(f"stdin is binary data (a NUL byte at offset {at}), not a prompt", ExitCode.USAGE)
    if len(data) > MAX_PROMPT_BYTES:
        fail(
            f"stdin holds more than {MAX_PROMPT_BYTES >> 20} MiB: too much for a prompt",
            ExitCode.USAGE,
        )
    return data.decode("utf-8", errors="replace")
