"""``isoagent task``: one subagent in its own process, no parent model turn."""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING, Any

import click

from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP
from isoagent.parent.cli.options import (
    agent_options,
    build_settings,
    describe,
    output_options,
    pick_agent,
    read_prompt,
    run_session,
)
from isoagent.parent.cli.output import Output

if TYPE_CHECKING:
    from isoagent.parent.session import Session

EPILOG = f"""\b
Examples:
  isoagent task --agent Explore "find where auth is handled"
  git diff | isoagent task --agent Plan "review this diff" > plan.md
  isoagent task - < prompt.txt

{EXIT_CODES_HELP}"""


@click.command(epilog=EPILOG)
@click.argument("prompt")
@click.option(
    "--agent", "-a", "agent_name", default="general-purpose", show_default=True,
    help="Agent type to run (see `isoagent agents`).",
)  # fmt: skip
@agent_options
@output_options
def task(prompt: str, agent_name: str, output_format: str, **options: Any) -> None:
    """Run one subagent on PROMPT in its own process and print its summary.

    PROMPT '-' reads the prompt from stdin. Otherwise text piped to stdin is attached
    to the prompt between <stdin> and </stdin> lines. Progress goes to stderr.
    """
    from isoagent.parent.children.supervisor import ChildRequest

    text = task_prompt(prompt)
    settings = build_settings(options)
    agent = pick_agent(settings.agents, agent_name)
    output = Output(output_format)
    request = ChildRequest(describe(text), text, agent)

    async def body(session: Session) -> int:
        finished = await session.supervisor.run(request)
        return output.finish(session.finish(finished.result))

    sys.exit(run_session(options, settings, body, sinks=output.sinks()))


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

    Only pipes and files are read, so a stdin nobody writes to (a socket, a terminal)
    never makes the command wait.
    """
    if sys.stdin is None:
        return ""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return ""
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return ""
    return sys.stdin.buffer.read().decode("utf-8", errors="replace")
