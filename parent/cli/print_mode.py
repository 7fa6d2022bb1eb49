"""``isoagent -p PROMPT``: ``claude -p`` as a drop-in, with Claude Code's flags.

It is ``isoagent run`` with Claude Code's names for things: ``--system-prompt``,
``--append-system-prompt``, ``--allowedTools``, ``--disallowedTools``, ``--agents JSON``,
``--permission-mode``, ``--add-dir`` (one of ``run``'s options), ``--continue``,
``--resume RUN``, ``--output-format``, and
``--input-format stream-json``, the control protocol the claude-agent-sdk speaks over
stdin (an ``initialize`` request answered first, then the prompt as a user message;
each further user message continues the conversation). Nothing goes to stderr but
warnings and errors, as with ``claude -p``. The SDK's other flags: ``sdk_options.py``
(those that are ``Options`` fields, and those refused by name), ``settings_flag.py``
(``--settings``), ``parent/claude_code/plugins.py`` (``--plugin-dir``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from isoagent.parent.claude_code.mcp_servers import SDK_ONLY
from isoagent.parent.claude_code.plugins import PluginRefused, plugin_agents
from isoagent.parent.cli.display import ProgressDisplay
from isoagent.parent.cli.errors import OutputErrorsCommand, fail, run_session_body
from isoagent.parent.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from isoagent.parent.cli.options import output_options
from isoagent.parent.cli.output import Output, end_when_reader_goes
from isoagent.parent.cli.prompts import read_piped_stdin, read_prompt
from isoagent.parent.cli.sdk_options import KnowsItsFlags, sdk_flags, sdk_settings_options
from isoagent.parent.cli.settings_flag import (
    ClaudeSettings,
    Unsupported,
    read_settings,
    workspace_settings,
)
from isoagent.parent.records.terminal_text import warn
from isoagent.parent.settings import Settings

if TYPE_CHECKING:
    from isoagent.parent.agent.permission_prompt import Decision
    from isoagent.parent.records.events import Sink

# the permission modes, and how much each lets run unasked where --allowedTools names what does
_WIDTH = {"default": 1, "acceptEdits": 2, "plan": 0, "bypassPermissions": 3, "dontAsk": 1,
          "auto": 1}  # fmt: skip
PERMISSION_MODES = list(_WIDTH)


class _PrintModeCommand(OutputErrorsCommand, KnowsItsFlags):
    """Print mode's command: the SDK's unknown flags set aside, and output errors one line."""


@click.command(name="isoagent -p", epilog=EXIT_CODES_HELP, cls=_PrintModeCommand)
@click.argument("prompt", required=False)
@click.option("-p", "--print", "print_flag", is_flag=True, help="Print mode (this command).")
@click.option("--system-prompt", default="", help="Replace the parent's system prompt.")
@click.option("--append-system-prompt", default="", help="Add to the parent's system prompt.")
@click.option(
    "--system-prompt-file", type=click.File(encoding="utf-8"), help="--system-prompt, from a file."
)
@click.option(
    "--append-system-prompt-file",
    type=click.File(encoding="utf-8"),
    help="--append-system-prompt, from a file.",
)
@click.option(
    "--allowedTools",
    "--allowed-tools",
    "allowed_tools",
    multiple=True,
    help="Tools the parent may use besides reading, e.g. 'Bash(git:*) Edit' (comma or "
    "space separated; repeatable). Default: every tool.",
)
@click.option(
    "--disallowedTools",
    "--disallowed-tools",
    "disallowed_tools",
    multiple=True,
    help="Tools taken from the parent and every agent type, e.g. 'Write,Bash(rm:*)'.",
)
@click.option("--agents", "agents_json", help="Agent types as JSON, as Claude Code takes them.")
@click.option(
    "--permission-mode",
    type=click.Choice(PERMISSION_MODES),
    default="default",
    show_default=True,
    help="plan: nothing writes (read-only children, no bash in the parent).",
)
@click.option(
    "--dangerously-skip-permissions",
    "skip_permissions",
    is_flag=True,
    help="As Claude Code's: --permission-mode bypassPermissions (no tool call is asked "
    "about); the sandbox still holds.",
)
@click.option("--continue", "-c", "continue_", is_flag=True, help="Continue the latest run.")
@click.option("--resume", "-r", "resume", help="Continue this session (a session id or a run id).")
@click.option(
    "--settings",
    "settings_value",
    metavar="JSON|FILE",
    help="Claude Code's settings: permissions (allow, deny, ask, defaultMode, "
    "additionalDirectories), model and hooks (command hooks, run by the parent) are applied; "
    "a setting isoagent cannot apply (env, ...) is refused.",
)
@click.option(
    "--plugin-dir",
    "plugin_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A Claude Code plugin's folder: its agents, as plugin:agent (repeatable); a plugin "
    "with hooks, MCP servers, commands or skills is refused.",
)
@click.option(
    "--permission-prompt-tool",
    metavar="stdio",
    help="stdio (with --input-format stream-json): the parent's tool calls that need a yes "
    "are asked of the claude-agent-sdk's can_use_tool.",
)
@click.option(
    "--input-format",
    type=click.Choice(["text", "stream-json"]),
    default="text",
    show_default=True,
    help="stream-json: the claude-agent-sdk's control protocol and user messages on stdin.",
)
@sdk_settings_options
@output_options
@sdk_flags
def print_mode(
    prompt: str | None,
    print_flag: bool,
    system_prompt: str,
    append_system_prompt: str,
    system_prompt_file: TextIO | None,
    append_system_prompt_file: TextIO | None,
    allowed_tools: tuple[str, ...],
    disallowed_tools: tuple[str, ...],
    agents_json: str | None,
    permission_mode: str,
    skip_permissions: bool,
    continue_: bool,
    resume: str | None,
    settings_value: str | None,
    plugin_dirs: tuple[Path, ...],
    permission_prompt_tool: str | None,
    input_format: str,
    output_format: str,
    include_partial_messages: bool,
    settings: Settings,
    unsupported: str,
) -> None:
    """Run the parent agent on PROMPT and print the answer, as `claude -p` does.

    Without PROMPT the prompt is read from stdin; with one, piped stdin is attached.
    """
    from isoagent.parent.agent.parent_agent import claude_settings

    if permission_prompt_tool is not None and not unsupported:
        if permission_prompt_tool != "stdio":
            why = "isoagent asks only through stdio (the SDK's can_use_tool), not an MCP tool"
            unsupported = (
                f"--permission-prompt-tool {permission_prompt_tool} is not supported: {why}"
            )
        elif input_format != "stream-json":
            fail("error: --permission-prompt-tool stdio needs --input-format stream-json")
    from_file = ClaudeSettings()
    if settings_value is not None:
        try:
            from_file = read_settings(settings_value)
        except Unsupported as exc:
            unsupported = unsupported or f"--settings is not supported: {exc}"
        except ValueError as exc:
            fail(f"error: invalid --settings: {exc}", ExitCode.USAGE)
    from_file, lines = workspace_settings(settings.workspace_trust, from_file)
    for line in lines:
        warn(line)
    plugged: dict[str, Any] = {}
    plugins: list[tuple[str, str]] = []  # (name, folder)
    for folder in plugin_dirs:
        try:
            name, agents = plugin_agents(folder)
            plugged.update(agents)
            plugins.append((name, os.path.realpath(folder)))
        except PluginRefused as exc:
            unsupported = unsupported or f"--plugin-dir is not supported: {exc}"
        except ValueError as exc:
            fail(f"error: {exc}", ExitCode.USAGE)
    for name, why in settings.mcp_servers.failed.items():
        if why == SDK_ONLY and input_format == "stream-json":
            continue  # the SDK is there: its tools are listed before the first run
        warn(f"warning: MCP server {name!r} failed: {why}")  # and so in init, as Claude Code
    if unsupported and input_format != "stream-json":  # the SDK hears it at initialize
        fail(f"error: {unsupported}")
    for given, file, flag in (
        (system_prompt, system_prompt_file, "--system-prompt"),
        (append_system_prompt, append_system_prompt_file, "--append-system-prompt"),
    ):
        if given and file is not None:
            fail(f"error: {flag} and {flag}-file cannot be used together", ExitCode.USAGE)
    system_prompt = system_prompt_file.read() if system_prompt_file else system_prompt
    if append_system_prompt_file is not None:
        append_system_prompt = append_system_prompt_file.read()
    if from_file.default_mode and _given("permission_mode") is None:
        if from_file.default_mode not in PERMISSION_MODES:
            fail(
                f"error: invalid --settings: defaultMode {from_file.default_mode!r}", ExitCode.USAGE
            )
        permission_mode = from_file.default_mode
    if skip_permissions:
        permission_mode = bypass_permissions(permission_mode)
    settings = dataclasses.replace(
        settings,
        agents={**settings.agents, **plugged},
        plugins=tuple(plugins),
        hooks=from_file.hooks,
        budget_between_calls=True,  # Claude Code's --max-budget-usd: the call that crosses ends
    )
    try:
        settings = _with_settings_file(settings, from_file)
        settings = claude_settings(
            settings,
            system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            allowed_tools=(*allowed_tools, *from_file.allow),
            disallowed_tools=(*disallowed_tools, *from_file.deny),
            agents=agents_json,
            permission_mode=permission_mode,
            continue_=continue_,
            resume=resume,
        )
    except ValueError as exc:
        fail(str(exc), ExitCode.USAGE)
    if permission_prompt_tool:
        settings = dataclasses.replace(settings, permission_prompt_tool=permission_prompt_tool)

    if input_format == "stream-json":
        sys.exit(_serve_stream(settings, output_format, unsupported, include_partial_messages))
    if prompt is None:
        prompt = read_prompt("-")
    else:
        prompt = read_prompt(prompt)
        piped = read_piped_stdin()
        if piped.strip():
            prompt = f"{prompt}\n{piped}"
    sys.exit(run_prompt(settings, prompt, output_format, partial=include_partial_messages)[0])


def _given(name: str) -> click.core.ParameterSource | None:
    """Where parameter ``name`` came from, unless it is its default (None then)."""
    source = click.get_current_context().get_parameter_source(name)
    return None if source in (None, click.core.ParameterSource.DEFAULT) else source


def _with_settings_file(settings: Settings, from_file: ClaudeSettings) -> Settings:
    """``settings`` with a ``--settings`` model (below ``--model`` and the environment),
    added folders and allowed domains; a ``ValueError`` says what cannot be used."""
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.options import added_dirs, child_network

    if from_file.model and _given("model") is None:
        settings = dataclasses.replace(settings, model=resolve_model(from_file.model))
    if from_file.add_dirs:
        more = added_dirs([*settings.add_dirs, *from_file.add_dirs])
        settings = dataclasses.replace(settings, add_dirs=more)
    if from_file.allowed_domains:  # an empty list lets nothing out: the network stays off
        domains = (*settings.allowed_domains, *from_file.allowed_domains)
        network = child_network(settings.child_network, domains, settings.remote is not None)
        settings = dataclasses.replace(settings, child_network=network, allowed_domains=domains)
    return settings


def run_prompt(
    settings: Settings,
    prompt: str,
    output_format: str,
    inbox: _Inbox | None = None,
    *,
    partial: bool = False,
) -> tuple[int, str]:
    """One parent run, printed in ``output_format`` (with ``partial``, every streamed
    event too): its exit status and run id. An ``inbox`` (stream-json input) may
    interrupt it."""
    from isoagent.parent.agent.parent_agent import parent_tools
    from isoagent.parent.session import Session

    output = Output(
        output_format,
        tools=parent_tools(settings).tools,
        permission_mode=settings.permission_mode,
        partial=partial,
    )
    run_id = ""
    output.claude.plugins = [
        {"name": name, "path": path, "source": f"{name}@inline"} for name, path in settings.plugins
    ]  # as Claude Code's init lists a --plugin-dir
    output.claude.mcp_servers = settings.mcp_servers.status()
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


def _serve_stream(
    settings: Settings, output_format: str, unsupported: str = "", partial: bool = False
) -> int:
    """The SDK's side of the conversation: answer control requests, run each user message
    (the second and later continue the conversation); the last run's status.
    ``unsupported``: a flag isoagent refuses, the answer to ``initialize``."""
    code: int = ExitCode.OK
    inbox = _Inbox()
    while (message := inbox.next()) is not None:
        if unsupported:  # refused before anything runs, whatever comes first
            if message.get("type") == "control_request":
                _respond(message, None, unsupported)
            break
        if message.get("type") == "control_request":
            settings = _answer(message, settings, inbox)
        elif message.get("type") == "user" and (text := _user_text(message)).strip():
            if settings.mcp_servers.sdk_names:
                from isoagent.parent.claude_code.sdk_mcp import with_sdk_servers

                servers = with_sdk_servers(settings.mcp_servers, inbox.control)
                settings = dataclasses.replace(settings, mcp_servers=servers)
            inbox.settings = settings
            inbox.running.set()
            interrupts = inbox.interrupts
            try:
                code, run_id = run_prompt(settings, text, output_format, inbox, partial=partial)
            finally:
                inbox.running.clear()
                inbox.interrupt = inbox.stop_task = None
            if code > 128 and inbox.interrupts == interrupts:
                return code  # a signal ended it (the SDK's disconnect): start nothing queued
            settings = dataclasses.replace(settings, budget_spent=inbox.spent)
            if run_id and _can_continue(settings, run_id):
                from isoagent.parent.agent.parent_agent import run_session

                session = settings.session_id or run_session(settings.runs_dir, run_id)
                settings = dataclasses.replace(settings, resume=run_id, session_id=session)
    if unsupported:
        fail(f"error: {unsupported}")
    return code


class _Inbox:
    """stdin's messages, read by a thread of their own: a control request that comes while
    a run is going is answered at once, not after the run; ``interrupt`` ends the parent's
    turn at its next step and ends the children running (see ``Session.interrupt``)."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.interrupt: Callable[[], None] | None = None  # the running session's
        self.stop_task: Callable[[str], bool] | None = None  # and its stop_child
        self.interrupts = 0  # interrupt requests so far
        self.spent = 0.0  # US dollars the session's runs spent, under --max-budget-usd
        self.cost = 0.0  # what the session's runs cost, as their results say
        self.settings: Settings | None = None  # the running (or last) run's
        self.context_tokens = 0  # the parent's context after its last answer
        self._queue: queue.Queue[dict[str, Any] | str | None] = queue.Queue()
        self._asked: dict[str, queue.Queue[dict[str, Any] | None]] = {}  # by request id
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True, name="stdin").start()

    def next(self) -> dict[str, Any] | None:
        """The next message between runs (None at the end of stdin)."""
        item = self._queue.get()
        if isinstance(item, str):
            fail(f"--input-format stream-json: not a JSON object: {item[:80]!r}", ExitCode.USAGE)
        return item

    def _read(self) -> None:
        for line in _lines(0 if sys.stdin is not None else -1):
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self._queue.put(line.decode("utf-8", "replace"))
                return
            if message.get("type") == "control_request" and self.running.is_set():
                self._during_run(message)
            elif message.get("type") == "control_response":
                self._answered(message.get("response"))
            else:
                self._queue.put(message)
        for waiting in list(self._asked.values()):  # nobody is left to answer
            waiting.put(None)
        self._queue.put(None)

    def ask(self, tool: str, tool_input: dict[str, Any], cancelled: threading.Event) -> Decision:
        """Claude Code's ``can_use_tool`` request, and the SDK's answer (a cancelled run, or
        stdin's end, is a no)."""
        from isoagent.parent.agent.permission_prompt import Decision

        request = {"subtype": "can_use_tool", "tool_name": tool, "input": tool_input}
        response = self.control(request, cancelled)
        if response is None:
            why = "cancelled" if cancelled.is_set() else "the SDK has gone"
            return Decision(False, tool_input, why)
        if response.get("subtype") != "success":
            return Decision(False, tool_input, str(response.get("error", "")))
        verdict = response.get("response") or {}
        if verdict.get("behavior") == "allow":
            updated = verdict.get("updatedInput")
            return Decision(True, updated if isinstance(updated, dict) else tool_input)
        if verdict.get("interrupt") and self.interrupt is not None:
            self.interrupt()
        return Decision(False, tool_input, str(verdict.get("message", "")))

    def control(
        self,
        request: dict[str, Any],
        cancelled: threading.Event | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any] | None:
        """Send the SDK a control request; its response (None: ``cancelled``, no answer
        within ``timeout`` seconds, or stdin ended). Any thread may ask."""
        request_id = f"isoagent-{next(self._ids)}"
        answer: queue.Queue[dict[str, Any] | None] = queue.Queue(1)
        self._asked[request_id] = answer
        _send({"type": "control_request", "request_id": request_id, "request": request})
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                with contextlib.suppress(queue.Empty):
                    return answer.get(timeout=0.2)
                if cancelled is not None and cancelled.is_set():
                    return None
                if deadline is not None and time.monotonic() > deadline:
                    return None
        finally:
            del self._asked[request_id]

    def hook_callback(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """An SDK hook callback's answer (``parent/agent/hooks.py``)."""
        return self.control(request, timeout=timeout)

    def _answered(self, response: object) -> None:
        if isinstance(response, dict):
            waiting = self._asked.get(str(response.get("request_id")))
            if waiting is not None:
                waiting.put(response)

    def _during_run(self, message: dict[str, Any]) -> None:
        request = message.get("request")
        if isinstance(request, dict) and request.get("subtype") == "interrupt":
            self.interrupts += 1
            if self.interrupt is not None:
                self.interrupt()
            _respond(message, {}, "")
        elif isinstance(request, dict) and request.get("subtype") == "stop_task":
            task = str(request.get("task_id"))
            if self.stop_task is not None and self.stop_task(task):
                _respond(message, {}, "")
            else:
                _respond(message, None, f"no task {task!r} is running")
        elif isinstance(request, dict) and request.get("subtype") in _ANY_TIME:
            assert self.settings is not None  # set before a run starts
            _respond(message, _ANY_TIME[request["subtype"]](self.settings, self), "")
        elif isinstance(request, dict) and request.get("subtype") == "set_model":
            _respond(message, {}, "")  # the next run's model: set when this one ends
            self._queue.put({**message, "answered": True})
        else:
            _respond(message, None, "isoagent cannot do this while a run is going")


def _lines(fd: int) -> Iterator[bytes]:
    """The lines of ``fd``, read with ``os.read``: a thread blocked here holds no lock of
    ``sys.stdin``'s, which would abort the interpreter's exit."""
    pending = b""
    while fd >= 0:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        yield from lines
    if pending:
        yield pending


def _can_continue(settings: Settings, run_id: str) -> bool:
    """Whether run ``run_id`` holds a conversation the next message can go on with (a
    first turn that was interrupted does not)."""
    from isoagent.parent.agent.parent_agent import ResumeError, earlier_conversation

    try:
        return bool(earlier_conversation(settings.runs_dir, run_id))
    except ResumeError:
        return False


def _mcp_status(settings: Settings, inbox: _Inbox) -> dict[str, Any]:
    """``get_mcp_status``: the session's servers (an SDK's not yet listed before a run)."""
    return {"mcpServers": settings.mcp_servers.status(sdk=not inbox.running.is_set())}


def _context_usage(settings: Settings, inbox: _Inbox) -> dict[str, Any]:
    """``get_context_usage``: the parent's context as the API counted it at its last
    answer (system prompt, tools and messages: isoagent does not count them apart)."""
    betas = settings.call_options.betas if settings.call_options is not None else ()
    window = 1_000_000 if any("context-1m" in beta for beta in betas) else 200_000
    used = inbox.context_tokens
    return {
        "categories": [
            {"name": "Context, as the API counted it", "tokens": used, "color": "claude"},
            {"name": "Free space", "tokens": max(window - used, 0), "color": "promptBorder"},
        ],
        "totalTokens": used, "maxTokens": window, "rawMaxTokens": window,
        "percentage": round(100 * used / window, 1), "model": settings.model,
        "isAutoCompactEnabled": False, "memoryFiles": [], "mcpTools": [], "gridRows": [],
        "agents": [{"agentType": name, "source": a.source} for name, a in settings.agents.items()],
    }  # fmt: skip


# control requests that have nothing to act on in isoagent, and why (README: the SDK)
_NOTHING_TO_DO = {
    "rewind_files": "isoagent keeps no file checkpoints to rewind to: a writing child "
    "changes the workspace itself, as Claude Code's tools do without checkpointing; use git",
    "mcp_reconnect": "isoagent's parent holds no MCP connection to renew: each turn of the "
    "parent and each child starts the servers it uses, so the next one tries a failed server "
    "again",
}

# control requests answered during a run as between runs
_ANY_TIME: dict[str, Callable[[Settings, _Inbox], dict[str, Any]]] = {
    "mcp_status": _mcp_status,
    "get_context_usage": _context_usage,
}


def _answer(message: dict[str, Any], settings: Settings, inbox: _Inbox) -> Settings:
    """Claude Code's reply to a control request: ``initialize`` succeeds (adding the agent
    types and the hook callbacks it carries) unless it registers a hook isoagent cannot run
    (a hook meant to block a tool call must not be ignored) or asks for skills;
    ``set_model`` sets the next run's model; anything else is refused by name, so the SDK
    does not wait for an answer that never comes. The settings the session runs with."""
    from isoagent.parent.agent.parent_agent import restrict_agents
    from isoagent.parent.claude_code.agent_files import inline_agents
    from isoagent.parent.model.aliases import resolve_model
    from isoagent.parent.options import default_model

    request = message.get("request")
    request = request if isinstance(request, dict) else {}
    subtype = request.get("subtype")
    error = f"isoagent does not support the control request {subtype!r}"
    if subtype == "initialize" and request.get("hooks"):
        from isoagent.parent.agent.hooks import Hooks, UnsupportedHook

        try:
            hooks = (settings.hooks or Hooks()).with_sdk(request["hooks"], inbox.hook_callback)
        except (ValueError, UnsupportedHook) as exc:
            subtype, error = None, f"hooks are not supported: {exc}"
        else:
            settings = dataclasses.replace(settings, hooks=hooks)
    if subtype == "initialize" and request.get("skills"):
        subtype, error = None, "skills is not supported: isoagent has no skills"
    if subtype == "set_model":  # for the next message's run, as in Claude Code
        settings = dataclasses.replace(
            settings, model=resolve_model(str(request.get("model") or default_model()))
        )
        if not message.get("answered"):
            _respond(message, {}, "")
        return settings
    if subtype == "interrupt":  # between runs: nothing to interrupt
        _respond(message, {}, "")
        return settings
    if subtype in _ANY_TIME:
        _respond(message, _ANY_TIME[subtype](settings, inbox), "")
        return settings
    if subtype == "mcp_toggle":
        try:
            servers = settings.mcp_servers.toggled(
                str(request.get("serverName")), bool(request.get("enabled"))
            )
        except ValueError as exc:
            subtype, error = None, str(exc)
        else:
            _respond(message, {}, "")
            return dataclasses.replace(settings, mcp_servers=servers)
    error = _NOTHING_TO_DO.get(str(subtype), error)
    if subtype == "stop_task":  # between runs
        error = f"no task {str(request.get('task_id'))!r} is running"
    if subtype == "set_permission_mode":
        mode = str(request.get("mode", ""))
        try:
            settings = _with_permission_mode(settings, mode)
        except ValueError as exc:
            subtype, error = None, str(exc)
        else:
            _respond(message, {}, "")
            return settings
    if subtype == "initialize" and request.get("agents"):
        try:
            added = inline_agents(json.dumps(request["agents"]))
        except ValueError as exc:
            subtype, error = None, f"invalid agents: {exc}"
        else:  # under the session's --disallowedTools, --allowedTools and plan mode too
            added = restrict_agents(
                added,
                settings.disallowed_tools,
                settings.permission_mode,
                settings.allowed_tools,
                settings.tools,
            )
            settings = dataclasses.replace(settings, agents={**settings.agents, **added})
    if subtype == "initialize":
        answer = {"commands": [], "output_style": "default", "models": [], "account": {},
                  "hook_on_failure_supported": True}  # fmt: skip
        _respond(message, answer, "")
    else:
        _respond(message, None, error)
    return settings


def bypass_permissions(asked: str) -> str:
    """``--dangerously-skip-permissions``: Claude Code's ``bypassPermissions``, said once;
    with another ``--permission-mode`` it is a usage error, as what to do is unclear."""
    if asked not in ("default", "bypassPermissions"):
        fail(
            f"--dangerously-skip-permissions is --permission-mode bypassPermissions: it "
            f"cannot go with --permission-mode {asked}",
            ExitCode.USAGE,
        )
    warn(
        "--dangerously-skip-permissions: no tool call is asked about (bypassPermissions); "
        "the sandbox still holds: each child as its agent type says, the parent's bash "
        "confined to the workspace"
    )
    return "bypassPermissions"


def _with_permission_mode(settings: Settings, mode: str) -> Settings:
    """``settings`` in permission ``mode`` from the next run on (``set_permission_mode``).
    Agent types are narrowed to it; one that would widen them (out of plan mode, or to
    more than ``--allowedTools`` gave) is a ``ValueError``: what they lost is not kept."""
    from isoagent.parent.agent.parent_agent import restrict_agents

    if mode not in _WIDTH:
        raise ValueError(f"unknown permission mode {mode!r}")
    now = _WIDTH.get(settings.permission_mode, 1)
    wider = _WIDTH[mode] > now if settings.allowed_tools else now == 0 and mode != "plan"
    if wider:
        raise ValueError(
            f"isoagent cannot widen a session from {settings.permission_mode} to {mode}: "
            "start a new session in that mode"
        )
    agents = restrict_agents(
        settings.agents, settings.disallowed_tools, mode, settings.allowed_tools, settings.tools
    )
    return dataclasses.replace(settings, permission_mode=mode, agents=agents)


def _respond(request: dict[str, Any], answer: dict[str, Any] | None, error: str) -> None:
    """A control response: ``answer`` (success) or ``error``, as one line in one write (the
    stdin thread may answer while a run writes its stream)."""
    response: dict[str, Any] = {"request_id": request.get("request_id")}
    if answer is not None:
        response.update(subtype="success", response=answer)
    else:
        response.update(subtype="error", error=error)
    _send({"type": "control_response", "response": response})


def _send(message: dict[str, Any]) -> None:
    """One line to the SDK, in one write (the stdin thread may write while a run writes
    its stream)."""
    line = json.dumps(message) + "\n"
    with contextlib.suppress(BrokenPipeError, ValueError):  # the SDK has gone
        sys.stdout.buffer.write(line.encode())
        sys.stdout.buffer.flush()


def _user_text(message: dict[str, Any]) -> str:
    content = (message.get("message") or {}).get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""
