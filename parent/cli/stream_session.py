"""Print mode's runs: one prompt printed in its ``--output-format`` (``run_prompt``), and the
claude-agent-sdk's session over ``--input-format stream-json`` (``serve_stream``): control
requests answered, each user message a run, the second and later going on with the
conversation."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from isoagent.parent.claude_code.slash_commands import (
    CLEAR,
    Command,
    UnknownCommand,
    invoked,
    load_commands,
)
from isoagent.parent.cli.claude_format import CLAUDE_CODE_PROTOCOL, ClaudeFormat
from isoagent.parent.cli.control_requests import answer, answer_during_run
from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import fail, run_session_body
from isoagent.parent.cli.exit_codes import ExitCode
from isoagent.parent.cli.output import Output, end_when_reader_goes
from isoagent.parent.cli.sdk_channel import Inbox, respond, send
from isoagent.parent.model.aliases import resolve_model
from isoagent.parent.records.claude_sessions import SessionFiles, text_of
from isoagent.parent.records.events import RunFinished
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings
from isoagent.protocol import Result, Status, Usage

if TYPE_CHECKING:
    from isoagent.parent.records.events import Sink


@dataclass(frozen=True)
class Printing:
    """How print mode prints its runs: ``--output-format``, ``--include-partial-messages``
    (every streamed event too), ``--session-mirror`` (the session file's entries too)."""

    output_format: str
    partial: bool = False
    mirror: bool = False


def run_prompt(
    settings: Settings,
    prompt: str,
    printing: Printing,
    inbox: Inbox | None = None,
    *,
    origin: dict[str, Any] | None = None,
    known: dict[str, Command] | None = None,
) -> tuple[int, str]:
    """One parent run, printed as ``printing`` says: its exit status and run id. An
    ``inbox`` (stream-json input) may interrupt it; ``origin``: the user message's stamp,
    given back on the result; ``known``: the slash commands, for init (default: the
    inbox's, or read now). Its messages go to the session's file too."""
    from isoagent.parent.agent.parent_agent import conversation_to_resume, parent_tools
    from isoagent.parent.session import Session

    output = Output(
        printing.output_format,
        tools=parent_tools(settings).tools,
        permission_mode=settings.permission_mode,
        partial=printing.partial,
        # as Claude Code's print mode: a child's tool calls, its words only if the SDK asks
        subagent_text=inbox is not None and inbox.forward_subagent_text,
        subagent_events=False,
    )
    run_id = ""
    output.claude.plugins = [
        {"name": name, "path": path, "source": f"{name}@inline"} for name, path in settings.plugins
    ]  # as Claude Code's init lists a --plugin-dir
    output.claude.mcp_servers = settings.mcp_servers.status()
    output.claude.origin = origin
    output.claude.output_style = settings.output_style.name
    output.claude.slash_commands = list(known if known is not None else commands(settings, inbox))
    mirror = None
    if printing.mirror and output.streams:

        def mirror(path: str, entries: list[dict[str, Any]]) -> None:
            output.lines({"type": "transcript_mirror", "filePath": path, "entries": entries})

    output.claude.sessions = SessionFiles(
        settings.workdir, CLAUDE_CODE_PROTOCOL, conversation_to_resume(settings), mirror
    )
    if inbox is not None:
        output.claude.cost_before = inbox.cost
        output.claude.context_tokens = inbox.context_tokens
    # -v: progress on stderr as run shows it (stream-json is the SDK's, which sends -v always)
    progress = ProgressDisplay(verbose=True) if settings.verbose and not output.streams else None
    sinks: list[Sink] = [*output.sinks(), *([progress] if progress is not None else [])]

    async def main() -> int:
        nonlocal run_id
        async with Session.open(settings, sinks=sinks) as session:
            run_id = session.run.run_id
            end_when_reader_goes(session, output.lines)
            output.hear(session.gateway)
            if progress is not None:
                progress.follow(session)
            if inbox is not None:
                inbox.interrupt = session.interrupt
                if inbox.interrupted():  # it came while the session opened, or before
                    session.interrupt()
                inbox.stop_task = session.stop_child
                if settings.permission_prompt_tool:
                    session.ask = inbox.ask
            result = await session.run_parent(prompt)
            if inbox is not None and session.cost_budget is not None:
                inbox.spent = session.cost_budget.spent  # the session's next run goes on
            if inbox is not None:  # the run is over: what comes from now on is for the next
                inbox.running.clear()
            final = session.finish(result)
            if inbox is not None:
                inbox.cost = output.claude.cost_before + output.claude.run_cost
                inbox.context_tokens = output.claude.context_tokens
            return output.finish(final, session)

    return run_session_body(main), run_id


def serve_stream(
    settings: Settings, printing: Printing, unsupported: str = "", refused: str = ""
) -> int:
    """The SDK's side of the conversation: answer control requests, run each user message
    (the second and later continue the conversation); the last run's status.
    ``unsupported``: a flag isoagent refuses, the answer to ``initialize``; ``refused``: why
    no message can run (a resume refused), each one's result."""
    code: int = ExitCode.OK
    inbox = Inbox(answer_during_run)
    inbox.commands = commands(settings)
    while (message := inbox.next()) is not None:
        inbox.prompt += message.get("type") == "user"
        if unsupported:  # refused before anything runs, whatever comes first
            if message.get("type") == "control_request":
                respond(message, None, unsupported)
            break
        if message.get("type") == "control_request":
            settings = answer(message, settings, inbox)
        elif message.get("type") == "user" and refused:
            send(_result(settings.session_id, refused))
            code = ExitCode.ERROR
        elif message.get("type") == "user" and (text := _user_text(message)).strip():
            if settings.mcp_servers.sdk_names:
                from isoagent.parent.claude_code.sdk_mcp import with_sdk_servers

                servers = with_sdk_servers(settings.mcp_servers, inbox.control)
                settings = dataclasses.replace(settings, mcp_servers=servers)
            try:
                text, asked = slash_prompt(text, settings, inbox.commands)
            except UnknownCommand as exc:
                send(_result(settings.session_id, str(exc)))
                code = ExitCode.ERROR
                continue
            if not text:  # /clear: what comes next is a new conversation
                settings = _cleared(settings, inbox)
                code = ExitCode.OK
                continue
            inbox.settings = settings
            inbox.running.set()
            try:
                origin = message.get("origin")
                code, run_id = run_prompt(
                    asked, text, printing, inbox,
                    origin=origin if isinstance(origin, dict) else None,
                )  # fmt: skip
            finally:
                inbox.running.clear()
                inbox.interrupt = inbox.stop_task = None
            if code > 128 and not inbox.interrupted():
                return code  # a signal ended it (the SDK's disconnect): start nothing queued
            settings = dataclasses.replace(settings, budget_spent=inbox.spent)
            if run_id and _can_continue(settings, run_id):
                from isoagent.parent.agent.parent_agent import run_session

                session = settings.session_id or run_session(settings.runs_dir, run_id)
                settings = dataclasses.replace(
                    settings, resume=run_id, session_id=session, resume_file=None, resume_at="",
                    resume_drops=None,
                )  # fmt: skip
    if unsupported:
        fail(f"error: {unsupported}")
    return code


def commands(settings: Settings, inbox: Inbox | None = None) -> dict[str, Command]:
    """The slash commands a prompt may invoke (the session's, once read)."""
    if inbox is not None and inbox.commands is not None:
        return inbox.commands
    return load_commands(settings.workdir, settings.setting_sources, warn, settings.plugins)


def slash_prompt(text: str, settings: Settings, known: dict[str, Command]) -> tuple[str, Settings]:
    """A prompt as its slash command makes it ("" for ``/clear``), and the settings its run
    uses (a command's ``model``); an ``UnknownCommand`` names one that cannot run."""
    slash = invoked(text, known)
    if slash is None:
        return text, settings
    command, arguments = slash
    if command.name == CLEAR:
        return "", settings
    if command.model:
        settings = dataclasses.replace(settings, model=resolve_model(command.model))
    return command.prompt(arguments), settings


def _cleared(settings: Settings, inbox: Inbox) -> Settings:
    """``/clear``: the SDK hears the conversation reset, and a result from the new one;
    the next message starts it."""
    old, new = settings.session_id or str(uuid.uuid4()), str(uuid.uuid4())
    reset = {"type": "conversation_reset", "new_conversation_id": new, "uuid": new,
             "trigger": "clear", "session_id": old}  # fmt: skip
    send(reset)
    send(_result(new))
    inbox.cost = 0.0
    inbox.context_tokens = 0
    return dataclasses.replace(settings, resume="", session_id=new, budget_spent=0.0)


def _result(session_id: str, error: str = "") -> dict[str, Any]:
    """The result of a message that ran no model: a reset, or a refused command."""
    claude = ClaudeFormat(None)
    claude.session_id = session_id
    status: Status = "error" if error else "ok"
    done = Result(error, status, 0, 0, Usage(), 0.0, error=error)
    return claude.result(RunFinished(result=done, run_dir=""))


def _can_continue(settings: Settings, run_id: str) -> bool:
    """Whether run ``run_id`` holds a conversation the next message can go on with (a
    first turn that was interrupted does not)."""
    from isoagent.parent.agent.parent_agent import ResumeError, earlier_conversation

    try:
        return bool(earlier_conversation(settings.runs_dir, run_id))
    except ResumeError:
        return False


def _user_text(message: dict[str, Any]) -> str:
    return text_of((message.get("message") or {}).get("content", ""))
